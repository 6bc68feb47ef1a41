"""Run by ``site`` at the start of every Python program of a ``python`` image pod (this directory is first on
the image's ``PYTHONPATH``): once the program imports ``socket``, wildcard binds take the pod's own address
(:mod:`vplane.runtime.podbind`) and Service and pod names resolve from the node's hosts file
(:mod:`vplane.runtime.resolver`), as in a pod with a network and a DNS server of its own. Nothing is
imported before the program needs it. Without vplane on the path (an operator's catalogue pointing
``python`` at another interpreter with this directory) nothing changes."""


def _patch_network() -> None:
    from vplane.runtime import podbind, resolver

    podbind.install()
    resolver.install()


try:
    from vplane.runtime import importhook
except ImportError:  # pragma: no cover - another interpreter
    pass
else:
    importhook.after_import("socket", _patch_network)

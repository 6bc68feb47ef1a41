"""The node runtime: vplane's kubelet (see docs/runtime.md and docs/architecture.md).

For exec, attach and port-forward: add a line to ``vplane.runtime.kubelet.ROUTES`` (method, path, the
``nodes/<subresource>`` to authorize, handler); a handler gets the request and a
``vplane.runtime.cri.ContainerRuntime`` (pod IPs, running containers, attach sessions through each
container's shim, exec processes in a container's environment), described in ``vplane.runtime.cri``.
"""

"""Run a function right after a module is first imported (standard library only, nothing imported eagerly).

A pod's Python programs get vplane's network patches from ``sitecustomize`` (:mod:`vplane.runtime.pysite`);
patching ``socket`` or ``uvloop`` at start would import them, and asyncio with uvloop, into every program,
``python -c`` exec probes included (about 60 ms each). Patched after their own import instead, a program
that never opens a socket pays nothing.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is not imported: it costs every program in a pod about 7 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from types import ModuleType


class _AfterImport:
    """A meta path finder that finds nothing itself: it wraps the real loader of a watched module."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[], object]]] = {}

    def find_spec(self, name: str, path: object, target: object = None) -> ModuleSpec | None:
        callbacks = self.pending.pop(name, None)
        if callbacks is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            for callback in callbacks:
                callback()

        loader.exec_module = exec_then_call  # type: ignore[union-attr,method-assign]
        return spec


_hook: _AfterImport | None = None


def after_import(name: str, callback: Callable[[], object]) -> None:
    """Call ``callback`` once ``name`` is imported: now if it already is, else right after its import."""
    global _hook
    if name in sys.modules:
        callback()
        return
    if _hook is None:
        _hook = _AfterImport()
        sys.meta_path.insert(0, _hook)
    _hook.pending.setdefault(name, []).append(callback)

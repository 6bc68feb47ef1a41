"""The built-in kinds: declared, per group, in :mod:`vplane.apiserver.kinds`.

Kept as the name the server and other packages import; see that package for the kinds and their rules.
"""

from __future__ import annotations

from vplane.apiserver.kinds import attach, bootstrap, bootstrap_objects, builtin_types, install

__all__ = ["attach", "bootstrap", "bootstrap_objects", "builtin_types", "install"]

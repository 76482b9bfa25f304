"""Methods from outside the package: a study's ``plugins:`` list names Python files or modules
that define and register methods (``@register_method``).

A file path is resolved against the study file's directory and imported under a module
name derived from its absolute path, once per process: the driver and every Ray worker load
the same plugin list before reading the registry (workers on other hosts need the file at
the same path, or an installed module). A plugin that fails to import, or whose method is
refused by the registry, is a one-line ``InputError`` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fairdp._imports import import_target, resolve_target
from fairdp.errors import InputError


def load_plugins(plugins: Sequence[str], base_dir: str | Path | None = None, key: str = "plugins") -> list[str]:
    """Import each plugin (a ``.py`` path, relative to ``base_dir``, or a module name) once;
    returns the resolved plugins."""
    resolved = []
    for i, plugin in enumerate(plugins):
        where = f"{key}[{i}]"
        if not isinstance(plugin, str) or not plugin:
            raise InputError(f"{where}: must be a file path or a module name, got {plugin!r}")
        target = resolve_target(plugin, base_dir)
        import_target(target, where)
        resolved.append(target)
    return resolved

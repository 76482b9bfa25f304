"""Methods from outside the package: a study's ``plugins:`` list names Python files or modules
that define and register methods (``@register_method``).

A file path is resolved against the study file's directory and imported under a module
name derived from its absolute path, once per process: the driver and every Ray worker load
the same plugin list before reading the registry (workers on other hosts need the file at
the same path, or an installed module). A plugin that fails to import, or whose method is
refused by the registry, is a one-line ``InputError`` naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from fairdp.errors import InputError

_LOADED: dict[str, str] = {}  # resolved plugin -> module name


def resolve_plugin(plugin: str, base_dir: str | Path | None = None) -> str:
    """An absolute ``.py`` path (relative paths against ``base_dir``) or a dotted module name."""
    if plugin.endswith(".py") or "/" in plugin or "\\" in plugin:
        path = Path(plugin).expanduser()
        if not path.is_absolute():
            path = Path(base_dir or ".") / path
        return str(path.resolve())
    return plugin


def load_plugins(plugins: Sequence[str], base_dir: str | Path | None = None, key: str = "plugins") -> list[str]:
    """Import each plugin (see ``resolve_plugin``) once; returns the resolved plugins."""
    resolved = []
    for i, plugin in enumerate(plugins):
        where = f"{key}[{i}]"
        if not isinstance(plugin, str) or not plugin:
            raise InputError(f"{where}: must be a file path or a module name, got {plugin!r}")
        target = resolve_plugin(plugin, base_dir)
        resolved.append(target)
        if target in _LOADED:
            continue
        try:
            _LOADED[target] = _import(target, where)
        except InputError:
            raise
        except SystemExit as e:  # a plugin that exits on import would end fairdp silently, exit 0
            raise InputError(f"{where}: {target}: called sys.exit({e.code!r}) while being imported; a plugin "
                             f"must only define and register methods") from None
        except Exception as e:  # noqa: BLE001 - the plugin's own error, as one line
            raise InputError(f"{where}: {target}: {type(e).__name__}: {' '.join(str(e).split())}") from None
    return resolved


def _import(target: str, where: str) -> str:
    if not target.endswith(".py"):
        try:
            importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name and target.startswith(e.name):
                raise InputError(f"{where}: no module named {target!r} (and no such .py file)") from None
            raise
        return target
    path = Path(target)
    if not path.is_file():
        raise InputError(f"{where}: {target}: no such plugin file")
    name = f"fairdp_plugin_{path.stem}_{hashlib.sha256(target.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return name

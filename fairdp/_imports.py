"""User code named in a study, imported once per process: method plugins and model factories.

A target is a dotted module name or a ``.py`` file. A file path is resolved against a base
directory (the study file's) and imported under a module name derived from its absolute
path, so the driver and every Ray worker import it under the same name (pickling and
dataclasses look classes up by it). A target that fails to import is a one-line
``InputError`` naming where it was written.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from fairdp.errors import InputError

LOADED: dict[str, str] = {}  # resolved target -> module name


def resolve_target(target: str, base_dir: str | Path | None = None) -> str:
    """An absolute ``.py`` path (relative paths against ``base_dir``) or a dotted module name."""
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = Path(base_dir or ".") / path
        return str(path.resolve())
    return target


def import_target(target: str, where: str, what: str = "a plugin must only define and register methods") -> ModuleType:
    """Import a resolved ``target`` once and return its module; errors name ``where``."""
    if target not in LOADED:
        try:
            LOADED[target] = _import(target, where)
        except InputError:
            raise
        except SystemExit as e:  # code that exits on import would end fairdp silently, exit 0
            raise InputError(f"{where}: {target}: called sys.exit({e.code!r}) while being imported; {what}") from None
        except Exception as e:  # noqa: BLE001 - the user's own error, as one line
            raise InputError(f"{where}: {target}: {type(e).__name__}: {' '.join(str(e).split())}") from None
    return sys.modules[LOADED[target]]


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
        raise InputError(f"{where}: {target}: no such file")
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

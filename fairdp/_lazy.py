"""Names a package imports on first use: its ``__getattr__`` and ``__dir__`` (PEP 562), so that
importing the package stays light (torch, Ray and pandas load only when a name needs them)."""

from __future__ import annotations

import importlib
import sys


def lazy_names(package: str, exports: dict[str, str]):
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (name -> the module that
    defines it): a name is imported when first read, then kept in the package."""

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)  # once: later lookups skip this function
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__

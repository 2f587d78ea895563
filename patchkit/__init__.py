"""patchkit: versioned patch series for a patched SGLang, applied all-or-nothing.

The library's public names (docs/api.md) are importable from here::

    from patchkit import Catalog, LocalTarget, apply, status

Each is loaded from its module on first use (PEP 562), so ``import patchkit`` loads only the
standard library: the engine (``patchkit.engine``) imports this package on hosts that have
none of the client's dependencies.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from . import errors

__version__ = "0.1.0"

#: The module that defines each public name; every error class of patchkit.errors too.
_EXPORTS: dict[str, str] = {
    **{name: "patchkit.api" for name in ("apply", "rollback", "status", "verify", "sync")},
    "Catalog": "patchkit.catalog",
    "Fix": "patchkit.catalog.model",
    "load_config": "patchkit.catalog.config",
    **{name: "patchkit.targets" for name in ("Target", "LocalTarget", "resolve_target")},
    "RemoteTarget": "patchkit.targets.remote",
    **{name: "patchkit.results" for name in ("OpResult", "FixOutcome", "FileOutcome",
                                             "HunkPlacement", "CheckResult", "FixState")},
    **{name: "patchkit.errors" for name, value in vars(errors).items()
       if isinstance(value, type) and issubclass(value, errors.PatchkitError)},
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name == "api":  # the public functions' module itself, as docs/api.md names it
        return import_module("patchkit.api")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'patchkit' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

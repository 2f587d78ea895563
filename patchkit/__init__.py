"""patchkit: versioned patch series for a patched SGLang, applied all-or-nothing.

The library's public names (docs/api.md) are importable from here::

    from patchkit import Catalog, LocalTarget, apply, status

They are loaded on first use (PEP 562), so ``import patchkit`` stays standard-library only
and cheap: the engine (``patchkit.engine``, stdlib only) imports this package on hosts that
have none of the client's dependencies, and a remote run builds a bare ``patchkit`` package
of its own (``patchkit.targets.transport``) without this file.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing's own flag, without importing typing (`patchkit --version`)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_ERRORS = (
    "PatchkitError", "UsageError", "ManifestError", "PatchFormatError", "UnsafePathError",
    "UnknownFixError", "CheckFailed", "PreconditionFailed", "VerificationFailed", "DriftError",
    "VersionMismatch", "NotApplied", "TargetFileMissing", "ConflictError", "LockBusy",
    "TargetError", "PermissionDenied", "RemoteError", "HostUnreachable", "AuthenticationFailed",
    "HostKeyError", "RemotePythonMissing", "ConnectionLost", "SessionFailed", "InternalError",
    "ConcurrentChange", "Terminated",
)

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "apply": "patchkit.api",
    "rollback": "patchkit.api",
    "status": "patchkit.api",
    "verify": "patchkit.api",
    "Catalog": "patchkit.catalog",
    "Fix": "patchkit.catalog.model",
    "Target": "patchkit.targets",
    "LocalTarget": "patchkit.targets",
    "resolve_target": "patchkit.targets",
    "RemoteTarget": "patchkit.targets.remote",
    "load_config": "patchkit.catalog.config",
    "OpResult": "patchkit.results",
    "FixOutcome": "patchkit.results",
    "FileChange": "patchkit.results",
    "HunkPlacement": "patchkit.results",
    "CheckResult": "patchkit.results",
    "FixState": "patchkit.results",
    **{name: "patchkit.errors" for name in _ERRORS},
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'patchkit' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # what type checkers and IDEs see; nothing is imported at run time
    from .api import apply, rollback, status, verify
    from .catalog import Catalog
    from .errors import (
        AuthenticationFailed, CheckFailed, ConcurrentChange, ConflictError, ConnectionLost, DriftError,
        HostKeyError, HostUnreachable, InternalError, LockBusy, ManifestError, NotApplied,
        PatchFormatError, PatchkitError, PermissionDenied, PreconditionFailed, RemoteError,
        RemotePythonMissing, SessionFailed, TargetError, TargetFileMissing, Terminated, UnknownFixError,
        UnsafePathError, UsageError, VerificationFailed, VersionMismatch,
    )
    from .catalog.config import load_config
    from .catalog.model import Fix
    from .targets.remote import RemoteTarget
    from .results import CheckResult, FileChange, FixOutcome, FixState, HunkPlacement, OpResult
    from .targets import LocalTarget, Target, resolve_target

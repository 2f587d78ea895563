"""patchkit's errors and the exit codes they map to.

Every expected failure is a :class:`PatchkitError` subclass whose message says what failed,
where, and what to do next. Only the CLI turns them into exit codes (``exit_code``).

This module uses the standard library only: the engine, which is shipped to remote hosts,
raises these same classes, and a result coming back from a host names its error by class name
(see :func:`error_from_dict`), so local and remote targets fail identically.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own flag, without importing typing (`patchkit --version`)
if TYPE_CHECKING:
    from typing import Any

# Exit codes; documented in docs/cli.md.
EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a precondition, verification or drift check failed
EXIT_USAGE = 2  # bad command line or bad input (manifest, patch, config)
EXIT_CONFLICT = 3  # a hunk does not apply
EXIT_LOCKED = 4  # another patchkit run holds the target's lock
EXIT_TARGET = 5  # target root missing or not a directory
EXIT_PERMISSION = 6  # target not writable / permission denied
EXIT_UNREACHABLE = 10  # host unreachable (DNS, refused, timeout)
EXIT_AUTH = 11  # SSH authentication failed
EXIT_HOSTKEY = 12  # host key unknown or changed
EXIT_REMOTE_PYTHON = 13  # no usable Python on the host
EXIT_CONNECTION_LOST = 14  # the connection dropped after the request reached the engine
EXIT_SESSION_FAILED = 15  # the session ended before the request reached the engine: nothing ran
EXIT_INTERNAL = 70  # a bug in patchkit (EX_SOFTWARE)
EXIT_TERMINATED = 143  # stopped by SIGTERM (128 + 15); what it wrote was put back


class PatchkitError(Exception):
    """Base of every error patchkit expects; carries an exit code and structured details."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "message": self.message, "details": self.details}


# -- bad input -------------------------------------------------------------------------------


class UsageError(PatchkitError):
    """The command line or library call was wrong."""


class ManifestError(PatchkitError):
    """A manifest or config file is malformed or inconsistent."""


class PatchFormatError(PatchkitError):
    """A patch file cannot be parsed."""


class UnsafePathError(PatchkitError):
    """A patch path is absolute, contains '..', or leaves its root through a symlink."""


class UnknownFixError(PatchkitError):
    """The catalog has no fix of that name."""


# -- checks ----------------------------------------------------------------------------------


class CheckFailed(PatchkitError):
    """A check about the target failed; nothing was written (or everything was undone)."""

    exit_code = EXIT_CHECK_FAILED


class PreconditionFailed(CheckFailed):
    """The target is not in the state the fix requires."""


class VerificationFailed(CheckFailed):
    """The fix was written but a verification failed; it was rolled back."""


class DriftError(CheckFailed):
    """A file patchkit wrote was changed since; rollback would lose that change."""


class VersionMismatch(CheckFailed):
    """Another version of the fix is applied."""


class NotApplied(CheckFailed):
    """The fix is not applied in the target."""


class ConcurrentChange(CheckFailed):
    """Another process wrote to a target file while patchkit was writing the target; every
    file was put back, with that process's change kept."""


class ConflictError(PatchkitError):
    """A hunk's context is not found in the file (zero fuzz)."""

    exit_code = EXIT_CONFLICT


# -- target ----------------------------------------------------------------------------------


class LockBusy(PatchkitError):
    exit_code = EXIT_LOCKED


class TargetError(PatchkitError):
    """The target or one of its roots is missing or unusable."""

    exit_code = EXIT_TARGET


class TargetFileMissing(PreconditionFailed):
    """A file the fix modifies does not exist in the target."""


class PermissionDenied(PatchkitError):
    exit_code = EXIT_PERMISSION


# -- remote ----------------------------------------------------------------------------------


class RemoteError(PatchkitError):
    """Base of the failures of a remote target's transport."""

    exit_code = EXIT_UNREACHABLE


class HostUnreachable(RemoteError):
    exit_code = EXIT_UNREACHABLE


class AuthenticationFailed(RemoteError):
    exit_code = EXIT_AUTH


class HostKeyError(RemoteError):
    exit_code = EXIT_HOSTKEY


class RemotePythonMissing(RemoteError):
    exit_code = EXIT_REMOTE_PYTHON


class ConnectionLost(RemoteError):
    """The session ended after the engine was told to run: the host may have changed the
    target (it finishes the run, or its journal is recovered by the next run)."""

    exit_code = EXIT_CONNECTION_LOST


class SessionFailed(RemoteError):
    """The host was reached but the session ended before the request reached the engine:
    nothing ran there and the target is unchanged."""

    exit_code = EXIT_SESSION_FAILED


class Terminated(PatchkitError):
    """The run was stopped by SIGTERM; the engine undid what it had written before it exited."""

    exit_code = EXIT_TERMINATED


class InternalError(PatchkitError):
    """Something patchkit did not expect: a bug."""

    exit_code = EXIT_INTERNAL


def _all_subclasses(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out


def error_from_dict(data: dict[str, Any]) -> PatchkitError:
    """Rebuild an error that crossed a process or host boundary as ``to_dict()``."""
    by_name = {c.__name__: c for c in _all_subclasses(PatchkitError)}
    cls = by_name.get(str(data.get("type")), InternalError)
    details = data.get("details") or {}
    err = cls(str(data.get("message", "unknown error")))
    err.details = dict(details)
    return err

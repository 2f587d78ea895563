"""patchkit's errors: each says what failed, where, and what to do next; only the CLI turns
them into exit codes; and :class:`Stop`, what SIGTERM, SIGHUP and SIGQUIT raise, as SIGINT
raises ``KeyboardInterrupt``. Standard library only: the engine raises them on remote hosts too.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

EXIT_OK = 0  # the exit codes, with what each guarantees: docs/cli.md
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
EXIT_ROLLOUT_STOPPED = 16  # a fleet rollout stopped: a host was refused, failed or rolled back
EXIT_CHANGE_STANDS = 17  # a hook failed after the change, and undoing it failed: it stands
EXIT_INTERNAL = 70  # a bug in patchkit (EX_SOFTWARE)
EXIT_TERMINATED = 143  # stopped by SIGTERM (128 + 15); what it wrote was put back


class PatchkitError(Exception):
    """Base of every expected error: details, and an exit code a subclass names in its bases."""

    exit_code = EXIT_USAGE

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "message": self.message, "details": self.details}


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


class CheckFailed(PatchkitError, exit_code=EXIT_CHECK_FAILED):
    """A check about the target failed; nothing was written (or everything was undone)."""


class PreconditionFailed(CheckFailed):
    """The target is not in the state the fix requires."""


class TargetFileMissing(PreconditionFailed):
    """A file the fix modifies does not exist in the target."""


class VerificationFailed(CheckFailed):
    """The fix was written but a verification failed; it was rolled back."""


class DriftError(CheckFailed):
    """A file patchkit wrote was changed since; rollback would lose that change."""


class FixLost(CheckFailed):
    """A fix patchkit applied is no longer in its files, though nobody edited them: a reinstall,
    or a move to another release, replaced them (``status``: ``lost``); apply it again."""


class VersionMismatch(CheckFailed):
    """Another version of the fix is applied."""


class NotApplied(CheckFailed):
    """The fix is not applied in the target."""


class ConcurrentChange(CheckFailed):
    """Another process wrote a target file during the run; all else was put back."""


class ConflictError(PatchkitError, exit_code=EXIT_CONFLICT):
    """A hunk's context is not found in the file (zero fuzz)."""


class LockBusy(PatchkitError, exit_code=EXIT_LOCKED):
    """Another patchkit run holds the target's lock."""


class TargetError(PatchkitError, exit_code=EXIT_TARGET):
    """The target or one of its roots is missing or unusable."""


class PermissionDenied(PatchkitError, exit_code=EXIT_PERMISSION):
    """The target is not writable, or a write failed."""


class RemoteError(PatchkitError, exit_code=EXIT_UNREACHABLE):
    """Base of the failures of a remote target's transport."""


class HostUnreachable(RemoteError):
    """The host's name, route or port cannot be reached."""


class AuthenticationFailed(RemoteError, exit_code=EXIT_AUTH):
    """SSH refused every credential offered."""


class HostKeyError(RemoteError, exit_code=EXIT_HOSTKEY):
    """The host's key is unknown or changed."""


class RemotePythonMissing(RemoteError, exit_code=EXIT_REMOTE_PYTHON):
    """The host has no usable Python to run the engine."""


class ConnectionLost(RemoteError, exit_code=EXIT_CONNECTION_LOST):
    """The session ended after the engine was told to run: the target may have changed."""


class SessionFailed(RemoteError, exit_code=EXIT_SESSION_FAILED):
    """The session ended before the request reached the engine: nothing ran on the host."""


class RolloutStopped(PatchkitError, exit_code=EXIT_ROLLOUT_STOPPED):
    """A fleet rollout stopped: a host was refused, failed or rolled back (its report says why)."""


class AnsibleFailed(PatchkitError, exit_code=EXIT_ROLLOUT_STOPPED):
    """Ansible itself failed (not one host): a bad inventory or playbook run; nothing ran."""


class ChangeNotUndone(PatchkitError, exit_code=EXIT_CHANGE_STANDS):
    """--after-cmd or --health-cmd failed after the change, and undoing the change failed too:
    the change stands, unconfirmed (``details.undo_error``: why the undo failed)."""


class Terminated(PatchkitError):
    """The run was stopped by SIGTERM (or SIGHUP, SIGQUIT); the engine undid what it had written
    before it exited. Exits 128 + the signal's number, as a shell reports it."""

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        signum = self.details.get("signum")
        return 128 + signum if isinstance(signum, int) and 0 < signum < 64 else EXIT_TERMINATED


class Interrupted(Terminated):
    """Ctrl-C (SIGINT) stopped the command; its message says what it left (exit 130)."""


class InternalError(PatchkitError, exit_code=EXIT_INTERNAL):
    """Something patchkit did not expect: a bug."""


def error_from_dict(data: dict[str, Any]) -> PatchkitError:
    """Rebuild an error that crossed a process or host boundary as ``to_dict()`` (else InternalError)."""
    cls = globals().get(str(data.get("type")))
    if not (isinstance(cls, type) and issubclass(cls, PatchkitError)):
        cls = InternalError
    err = cls(str(data.get("message", "unknown error")))
    err.details = dict(data.get("details") or {})  # any keys a host sent, as they are
    return err


#: The signals that stop a run as SIGINT does (SIGINT raises ``KeyboardInterrupt`` itself).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT")
                     if hasattr(signal, name))


class Stop(BaseException):
    """Raised by SIGTERM, SIGHUP or SIGQUIT inside :func:`stopping_on_signals`: caught, like
    SIGINT's ``KeyboardInterrupt``, only by what says what the run left (the transaction's
    undo, the hooks, a fleet's playbook, an ssh session, the CLI's boundary)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


_STOPPING: List[bool] = []  # a block of stopping_on_signals is open: it owns the signals


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """SIGTERM, SIGHUP (a dropped terminal or SSH session) and SIGQUIT raise :class:`Stop` in
    the block, so what it does is put back or said, as on SIGINT; the handlers before are
    restored after (nothing is installed outside the main thread, nor for a signal ignored when
    the block opens: under ``nohup``, or the ssh agent, which ignores SIGHUP so that a dropped
    connection never stops a run half way on the host, it stays ignored). The outermost block owns
    them: the CLI's, for a whole command, where the engine's, the hooks' and a fleet's own
    (for a library caller) change nothing, and a second signal stays ignored until it ends."""
    if _STOPPING:
        yield
        return
    previous: Dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue  # ignored when it started (nohup, the ssh agent's SIGHUP): it stays so
        try:
            previous[signum] = signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main thread
            break
    _STOPPING.extend([True] if previous else [])
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if previous:
            _STOPPING.pop()


def _on_signal(signum: int, _frame: Any) -> None:
    for each in STOP_SIGNALS:  # a second signal must not stop the undo
        signal.signal(each, signal.SIG_IGN)
    raise Stop(signum)


def reap(proc: Any, within: float = 5.0) -> Optional[int]:
    """Wait for a child patchkit has killed (or that is ending): its exit status, as
    ``proc.wait()`` gives it. A signal can land in Python's own ``Popen.wait`` just after it
    took the object's wait lock and before the ``try`` that gives it back; every later
    ``wait`` then blocks on that lock, and with the stop signals ignored by then, forever.
    Past ``within`` seconds the child is reaped by its process id instead."""
    import os
    import subprocess

    try:
        return proc.wait(within)
    except subprocess.TimeoutExpired:
        try:
            _, status = os.waitpid(proc.pid, 0)
        except ChildProcessError:  # reaped by the wait that was cut short after all
            return proc.returncode
        proc.returncode = os.waitstatus_to_exitcode(status)
        return proc.returncode


_HELD: List[int] = []  # signals that came before the CLI's block opened (hold_signals)


def hold_signals() -> None:
    """The ``patchkit`` program's first act: until the CLI's :func:`stopping_on_signals` opens
    (imports take tens of milliseconds), SIGINT, SIGTERM, SIGHUP and SIGQUIT are kept, not
    acted on, so a run stopped that early still says so (with ``--json``, as a JSON document);
    :func:`take_held` gives the first back. A signal ignored when the program starts stays so."""
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            signal.signal(signum, _hold)
        except (ValueError, OSError):  # not the main thread
            return


def _hold(signum: int, _frame: Any) -> None:
    _HELD.append(signum)


def take_held() -> Optional[int]:
    """Inside the CLI's block: SIGINT raises ``KeyboardInterrupt`` again, and the first signal
    :func:`hold_signals` kept, if any (the later ones ignored, as a second one is), is returned."""
    if signal.getsignal(signal.SIGINT) is _hold:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not _HELD:
        return None
    for each in STOP_SIGNALS:
        if signal.getsignal(each) is not signal.SIG_IGN:
            signal.signal(each, signal.SIG_IGN)
    return _HELD[0]

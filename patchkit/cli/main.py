"""The `patchkit` command group and the one boundary that turns errors into exit codes.
A command's module is imported only when that command runs."""

from __future__ import annotations

import functools
import gc
import os
import signal
import sys
from contextlib import suppress
from importlib import import_module
from typing import Any

import click

from .. import __version__
from ..errors import (EXIT_INTERNAL, EXIT_USAGE, STOP_SIGNALS, Interrupted, PatchkitError, Stop,
                      Terminated, stopping_on_signals, take_held)
from .common import State, suggests

#: Command name -> the module under patchkit.cli that defines it, in the order --help lists them.
COMMAND_MODULES = {name: module for module, names in (
    ("fixes", "list show"), ("ops", "apply verify"), ("status", "status"), ("ops", "rollback undo"),
    ("log", "log"),
    ("authoring", "init new refresh"), ("upstream", "upstream"), ("demo", "demo"),
    ("rebase", "rebase"), ("sync", "sync"), ("matrix", "matrix"), ("diff", "diff"), ("fleet", "plan"),
    ("interop", "import export")) for name in names.split()}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMAND_MODULES)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with the first sentence of its help, whole (wrapped, never cut with
        "..." as click's short help is)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.short_help or _first_sentence(cmd.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """The command; Ctrl-C in it is a :class:`Stop` of SIGINT, said by :func:`_run` as any
        signal is (click would print a blank line first, then raise Abort)."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Stop(signal.SIGINT) from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is None:
            return None
        return _beginning(next(c for c in import_module(f"{__package__}.{module}").COMMANDS
                               if c.name == cmd_name))


def _beginning(command: click.Command) -> click.Command:
    """``command`` (each command of a group) marking the run's :class:`State` ``began`` when
    its function is called, its options read: an interrupt before that read and wrote nothing."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _beginning(sub)
        return command
    callback = command.callback
    if callback is None or getattr(callback, "marks_begun", False):
        return command

    @functools.wraps(callback)
    def began(*args: Any, **kwargs: Any) -> Any:
        click.get_current_context().ensure_object(State).began = True
        return callback(*args, **kwargs)

    began.marks_begun = True  # type: ignore[attr-defined]
    command.callback = began
    return command


def _misplaced(exc: click.ClickException, args: list[str]) -> str | None:
    """An option of the command given before it (``patchkit --json apply``): said as such,
    instead of click's guess among patchkit's own options ("Did you mean '--version'?")."""
    ctx = getattr(exc, "ctx", None)
    if not isinstance(exc, click.NoSuchOption) or ctx is None or ctx.parent is not None:
        return None
    later = [a for a in args if a in COMMAND_MODULES]
    command = cli.get_command(ctx, later[0]) if later else None
    if command is None or not any(exc.option_name in p.opts for p in command.params):
        return None
    return (f"{exc.option_name} is an option of `patchkit {command.name}`: put it after the "
            f"command (patchkit {command.name} {exc.option_name} ...)")


def _first_sentence(text: str) -> str:
    import re

    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = re.search(r"(?<!\.)\.\s", paragraph)  # not the dots of "FIX... "
    return paragraph if end is None else paragraph[:end.start() + 1]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="patchkit")
@click.option("--catalog", "catalog_dir", metavar="DIR", help="Catalog directory (holds manifests/ and patches/).")
@click.option("--config", "config_path", metavar="FILE", help="Project config (default: ./patchkit.toml).")
@click.option("--debug", is_flag=True, envvar="PATCHKIT_DEBUG", help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, catalog_dir: str | None, config_path: str | None, debug: bool) -> None:
    """Versioned patch series for a patched SGLang, applied all-or-nothing."""
    state = ctx.ensure_object(State)
    state.catalog_dir = catalog_dir
    state.config_path = config_path
    state.debug = debug


class _Output:
    """sys.stdout or sys.stderr whose reader may leave (``patchkit apply FIX | head -0``): then
    output is dropped and the command carries on, so its exit status says what it did."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            return  # not a descriptor (a test's capture): each write is dropped on its own
        _to_devnull(fd)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _to_devnull(fd: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _guard_output() -> tuple[Any, Any]:
    """Wrap stdout and stderr in :class:`_Output`, a closed standard descriptor first made
    /dev/null so no file patchkit opens takes its number. Returns the streams it replaced."""
    saved = sys.stdout, sys.stderr
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _to_devnull(fd)
    sys.stdout, sys.stderr = [  # type: ignore[assignment]
        _Output(open(fd, "w", closefd=False) if stream is None else stream)  # noqa: SIM115
        for fd, stream in ((1, sys.stdout), (2, sys.stderr))]  # a missing one: lives as long as the process
    return saved


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure leaves here with a documented exit code (docs/cli.md)."""
    state = State()
    saved = _guard_output()
    try:
        with stopping_on_signals():  # the command's, all of it (an ssh session's too)
            try:
                code = _run(argv, state) or 0
            except Stop as stop:  # while a failure was being said: as the shell would say it
                code = 128 + stop.signum
        sys.exit(code)
    finally:
        if isinstance(sys.stdout, _Output):
            sys.stdout.flush()
        sys.stdout, sys.stderr = saved  # for a caller in the same process (the tests)


def entry(argv: list[str] | None = None) -> None:
    """The ``patchkit`` program (its console script, ``python -m patchkit``): :func:`main`, and
    then, as the process ends, no collection of its whole heap. Python's finalization runs a
    full garbage collection over every object the command made and imported (4 to 8 ms of a
    20-fix ``status``, docs/performance.md) to free memory the exit frees anyway; frozen, the
    objects are left to the exit (files are closed by their ``with`` blocks, and Python still
    flushes stdout and stderr). A caller in the same process uses :func:`main`, which leaves
    its collector alone. A signal from then on is ignored: the command has said its result
    and chosen its exit code, which a Ctrl-C during the interpreter's exit would replace with
    death by the signal (a script would read ``"ok": true`` and a failed exit)."""
    try:
        main(argv)
    finally:
        for signum in (signal.SIGINT, *STOP_SIGNALS):
            with suppress(ValueError, OSError):  # not the main thread
                signal.signal(signum, signal.SIG_IGN)
        gc.freeze()


#: The options that say which catalog and target a command acts on.
WHERE_OPTIONS = ("--catalog", "--config", "--target", "-t", "--root", "--python", "--ssh-option",
                 "--ssh-program")
def _suggests(err: PatchkitError) -> bool:
    """Whether patchkit's words (not a hook's command or output) suggest a command on a target
    that does not name its target already (a remote target's ``patchkit status --target
    ssh://...``)."""
    from ..hooks import patchkits_words

    return suggests(patchkits_words(err.message, err.details), "--target")


def _where_given(args: list[str]) -> list[str]:
    """The catalog and target options of this command line, as given: a next step an error
    suggests acts on the same target only with them (docs/cli.md, Exit codes)."""
    head = args[:args.index("--")] if "--" in args else args
    given: list[str] = []
    i = 0
    while i < len(head):
        name, eq, _value = head[i].partition("=")
        if name in WHERE_OPTIONS:
            taken = 1 if eq else 2
            given += head[i:i + taken]
            i += taken
        else:
            i += 1
    return given


def _target_given(args: list[str]) -> str | None:
    """The one ``--target`` of a command line (None: none, or several), read from the line as
    :func:`_where_given` reads it, for a ``--json`` error click raised before reading it."""
    given = _where_given(args)
    found = []
    for i, word in enumerate(given):
        name, eq, value = word.partition("=")
        if name in ("--target", "-t"):
            found.append(value if eq else given[i + 1] if i + 1 < len(given) else None)
    return found[0] if len(found) == 1 else None


def _command_named(args: list[str]) -> str | None:
    """The command a command line names (``apply``, ``upstream checkout``), read from its words,
    for a ``--json`` error click raised before reaching it."""
    first = next((a for a in args if a in COMMAND_MODULES), None)
    if first is None:
        return None
    ctx = click.Context(cli)
    command = cli.get_command(ctx, first)
    if isinstance(command, click.Group):
        sub = next((a for a in args[args.index(first) + 1:] if not a.startswith("-")), None)
        if sub is not None and command.get_command(ctx, sub) is not None:
            return f"{first} {sub}"
    return first


def _interrupted(state: State, signum: int) -> Terminated:
    """What an interrupt (Ctrl-C; SIGTERM, SIGHUP, SIGQUIT) left, said as the engine says it
    (its ``left_behind``): on a local target its journal tells; on a remote one, nothing ran
    before the request reached the host (after, the session says it: ConnectionLost)."""
    name = signal.Signals(signum).name
    said = "interrupted by SIGINT" if signum == signal.SIGINT else f"terminated by {name}"
    target = state.resolved()
    if not state.began:
        said += "; it stopped before the command began: nothing was read or written"
    elif target is None:
        said += f"; {state.leaves}" if state.leaves else ""
    elif getattr(target, "is_remote", False):
        said += target.left_behind(state.writes, state.answered)  # type: ignore[attr-defined]
    else:
        from ..engine import left_behind
        from ..targets import state_root_of

        said += ("; %s. Run patchkit status to see the target"
                 % left_behind(target.roots[state_root_of(target.roots)], state.writes,
                               state.committed))
    return (Interrupted if signum == signal.SIGINT else Terminated)(
        said, signal=name, signum=int(signum), **({"committed": True} if state.committed else {}))


def _unhooked(err: Terminated, state: State) -> None:
    """A signal after the change was complete and before its hooks began: say that they never
    ran (the hooks' own interrupt says what they did, ``details.after``)."""
    if not err.details.get("committed") or "after" in err.details or not state.hooks:
        return
    names = " and ".join(state.hooks)
    err.message += (f". {names} never ran, so the change stands unconfirmed: run "
                    f"{'them' if len(state.hooks) > 1 else 'it'} yourself, or take the change "
                    "out with patchkit undo")
    err.details["hooks_not_run"] = list(state.hooks)


def _failed(err: PatchkitError, state: State, argv: list[str] | None,
            named: dict[str, Any] | None = None) -> int:
    """Say ``err`` (on stderr, and as ``--json``'s object with ``named`` over the run's names),
    with the note of this run's options when it suggests a command; its exit code."""
    from .render import print_json, render_error

    if isinstance(err, Terminated):
        _unhooked(err, state)
    given = _where_given(sys.argv[1:] if argv is None else argv) if _suggests(err) else []
    if state.json:
        result = getattr(err, "result", None)
        error = err.to_dict()
        if given:
            error["details"] = {**error["details"], "options": given}
        print_json({**state.named(), **(named or {}),
                    **(result.to_json() if result is not None else {}), "ok": False, "error": error})
    render_error(None, err)
    if given:
        import shlex

        sys.stderr.write(f"note: run the patchkit commands above with this run's options: "
                         f"{shlex.join(given)}\n")
    if state.debug:
        import traceback

        traceback.print_exc()
    return err.exit_code


def _stopped(state: State, argv: list[str] | None, signum: int) -> int:
    """The exit code of a run a signal stopped, said as docs/cli.md gives it (with --json, its
    object, even when the signal came before --json was read)."""
    target = state.resolved()
    args = sys.argv[1:] if argv is None else argv
    if not state.json and "--json" in (args[:args.index("--")] if "--" in args else args):
        state.json = True  # stopped before --json was read: its object all the same
    named = {"op": state.op or _command_named(args),
             "target": target.description if target else state.target_given or _target_given(args)}
    return _failed(_interrupted(state, signum), state, argv, named)


def _signal_under(exc: BaseException) -> int | None:
    """The signal an error stands for, when a Ctrl-C or a :class:`Stop` is its cause: Python
    3.11 turns one raised while a class is made (a module imported as the command starts) into
    ``RuntimeError: Error calling __set_name__``, which is no bug of patchkit's."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, Stop):
            return cause.signum
        if isinstance(cause, KeyboardInterrupt):
            return int(signal.SIGINT)
        cause = cause.__cause__ or cause.__context__
    return None


def _run(argv: list[str] | None, state: State) -> int:
    """The command's exit code; every error turned into its own (click's usage errors too).
    A signal that came before the CLI could act on it (``errors.hold_signals``) is taken
    inside the handlers below: a Ctrl-C landing as SIGINT is given back to Python's own
    handler raises KeyboardInterrupt there, and is said as any other."""
    try:
        held = take_held()
        if held is not None:
            raise Stop(held)
        return cli.main(args=argv, prog_name="patchkit", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.Abort, Stop, KeyboardInterrupt) as stop:  # Ctrl-C, a signal (the hooks,
        # which say more, and an ssh session past the go-ahead end as a PatchkitError)
        return _stopped(state, argv, getattr(stop, "signum", signal.SIGINT))
    except click.ClickException as exc:
        code = EXIT_USAGE if exc.exit_code == 2 else exc.exit_code
        args = sys.argv[1:] if argv is None else argv  # the line click refused: --json before any --?
        said = _misplaced(exc, args) or exc.format_message()
        if state.json or "--json" in (args[:args.index("--")] if "--" in args else args):
            from .render import print_json  # the object docs/cli.md promises on any failure

            named = state.named(getattr(exc, "ctx", None))
            if named["target"] is None:  # click refused the line before --target was read
                named["target"] = _target_given(args)
            if named["op"] is None:  # refused before the command was read (--json before it)
                named["op"] = _command_named(args)
            print_json({**named, "ok": False, "error": {
                "type": "UsageError" if code == EXIT_USAGE else type(exc).__name__,
                "message": said, "details": {}}})
        ctx = getattr(exc, "ctx", None)  # git's manner: one line, then where help is
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        sys.stderr.write(f"error: {said}{hint}\n")
        return code
    except PatchkitError as err:
        return _failed(err, state, argv)
    except Exception as exc:  # the "bug" exit: a traceback only with --debug
        signum = _signal_under(exc)
        if signum is not None:  # a signal, wrapped by Python on its way (a class being made)
            return _stopped(state, argv, signum)
        if state.debug or os.environ.get("PATCHKIT_DEBUG"):
            import traceback

            traceback.print_exc()
        sys.stderr.write(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "this is a bug in patchkit; rerun with --debug for the traceback and report it\n"
        )
        return EXIT_INTERNAL

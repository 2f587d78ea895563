"""The `patchkit` command group and the one boundary that turns errors into exit codes.

click costs about 15 ms to import (with uuid, datetime, gettext and locale), a tenth of a small
apply. So apply, rollback, verify and status (:data:`FAST_COMMANDS`) have a fast path: a
command line that uses only their plain options (``--opt VALUE``, ``--opt=VALUE``, flags, fix
names) is read here without click and handed to the command's ``run``, and a bare
``--version`` is answered here; anything else (help, a mistake, ``--``, clustered short flags,
``PATCHKIT_DEBUG`` set) goes through click, which gives its usual answer. Both paths call the same ``run`` with the same values.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from importlib import import_module

from .. import __version__
from ..errors import EXIT_INTERNAL, EXIT_USAGE, PatchkitError
from .common import State, apply_fast_state

TYPE_CHECKING = False  # typing's own flag, without importing typing (`patchkit --version`)
if TYPE_CHECKING:
    from typing import Any, Callable

    import click

    from .common import FastOptions

#: Command name -> the module under patchkit.cli that defines it. Modules are imported only
#: when their command runs, so `patchkit --version` does not pay for GitPython, tomlkit or rich.
COMMAND_MODULES = {
    "list": "fixes",
    "show": "fixes",
    "apply": "apply",
    "verify": "verify",
    "status": "status",
    "rollback": "rollback",
    "log": "log",
    "init": "authoring",
    "new": "authoring",
    "refresh": "authoring",
    "upstream": "upstream",
    "demo": "demo",
    "rebase": "rebase",
    "diff": "diff",
}

#: Commands whose module defines ``FAST_OPTIONS`` and ``run(state, fixes, **options)``.
FAST_COMMANDS = ("apply", "rollback", "verify", "status")

#: The group's own options as the fast path reads them (``--debug`` is a flag).
_GROUP_VALUES = {"--catalog": "catalog_dir", "--config": "config_path"}


def _read_options(args: list[str], options: FastOptions) -> dict[str, Any] | None:
    """The parameters click would give the command for ``args``, or None to let click read them."""
    params: dict[str, Any] = {name: default for name, _kind, default in options.values()}
    fixes: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            fixes.append(token)
            continue
        opt, eq, value = token.partition("=")
        spec = options.get(opt)
        if spec is None or (eq and (spec[1] == "flag" or not opt.startswith("--"))):
            return None
        name, kind, _default = spec
        if kind == "flag":
            params[name] = True
            continue
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        if kind == "float":
            try:
                params[name] = float(value)
            except ValueError:
                return None
        elif kind == "multiple":
            params[name] = (*params[name], value)
        elif kind == "once":  # given twice: both kept, for the command to refuse
            held = params[name]
            params[name] = value if held is None else (
                (*held, value) if isinstance(held, tuple) else (held, value))
        else:
            params[name] = value
    params["fixes"] = tuple(fixes)
    return params


def _print_version() -> int:
    """What click's ``--version`` option prints."""
    sys.stdout.write(f"patchkit, version {__version__}\n")
    return 0


def fast_command(args: list[str], state: State) -> partial[int] | None:
    """The command ``args`` ask for, ready to run without click (its parameters in
    ``.keywords``), or None: click reads them."""
    if "PATCHKIT_DEBUG" in os.environ:  # click reads its value (and refuses a bad one)
        return None
    if args == ["--version"]:
        return partial(_print_version)
    group: dict[str, Any] = {"catalog_dir": None, "config_path": None, "debug": False}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt, eq, value = args[i].partition("=")
        i += 1
        if opt == "--debug" and not eq:
            group["debug"] = True
            continue
        if opt not in _GROUP_VALUES:
            return None
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        group[_GROUP_VALUES[opt]] = value
    if i >= len(args) or args[i] not in FAST_COMMANDS:
        return None
    module = import_module(f"{__package__}.{COMMAND_MODULES[args[i]]}")
    params = _read_options(args[i + 1:], module.FAST_OPTIONS)
    if params is None:
        return None
    if not getattr(module, "FAST_TAKES_FIXES", True) and params.pop("fixes"):
        return None  # an argument the command does not take: click says so
    state.catalog_dir, state.config_path, state.debug = (
        group["catalog_dir"], group["config_path"], group["debug"])
    apply_fast_state(state, params)
    return partial(module.run, state, **params)


def _build_cli() -> Any:
    import click

    class LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return list(COMMAND_MODULES)

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            module = COMMAND_MODULES.get(cmd_name)
            if module is None:
                return None
            for command in import_module(f"{__package__}.{module}").COMMANDS:
                if command.name == cmd_name:
                    return command
            raise RuntimeError(f"patchkit.cli.{module} does not define the command {cmd_name!r}")

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

    return cli


def __getattr__(name: str) -> Any:
    if name == "cli":  # the click group, built on first use: the fast path needs no click
        globals()["cli"] = _build_cli()
        return globals()["cli"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Output:
    """sys.stdout or sys.stderr, whose reader may leave (``patchkit apply FIX | head -0``).

    Output is a report on the operation, not part of it: once the stream's reader is gone,
    what is written is dropped (the descriptor now /dev/null, so the flush at exit cannot fail
    either) and the command carries on, so its exit status says what the operation did."""

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
    """Wrap stdout and stderr in :class:`_Output`; a standard descriptor closed at start
    (``patchkit apply FIX >&-``) becomes /dev/null first, so no file patchkit opens takes its
    number and nothing meant for it lands in a target file. The streams it replaced."""
    saved = sys.stdout, sys.stderr
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _to_devnull(fd)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives as long as the process
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    sys.stdout, sys.stderr = _Output(sys.stdout), _Output(sys.stderr)  # type: ignore[assignment]
    return saved


def _run_fast(run: Callable[[], int]) -> int:
    """Run a fast-path command, meeting interrupts as click's main does."""
    try:
        return run()
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\n")
        sys.stderr.write("aborted\n")
        sys.exit(130)


def _run_click(args: list[str] | None, state: State) -> int:
    import click

    cli = globals().get("cli") or __getattr__("cli")
    try:
        return cli.main(args=args, prog_name="patchkit", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.stderr.write("aborted\n")
        sys.exit(130)
    except click.ClickException as exc:
        code = EXIT_USAGE if exc.exit_code == 2 else exc.exit_code
        if state.json or _asks_json(sys.argv[1:] if args is None else args):
            from .render import print_json  # the object docs/cli.md promises on any failure

            print_json({"ok": False, "error": {"type": "UsageError" if code == EXIT_USAGE
                                               else type(exc).__name__,
                                               "message": exc.format_message(), "details": {}}})
        exc.show()
        sys.exit(code)


def _asks_json(args: list[str]) -> bool:
    """Whether ``--json`` is among the options of a command line click refused (its callback
    may not have run): before any ``--``, after which it would be an argument."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure leaves here with a documented exit code (docs/cli.md)."""
    ctx_state = State()
    saved = _guard_output()
    try:
        _main(argv, ctx_state)
    finally:
        if sys.stdout is not saved[0] and isinstance(sys.stdout, _Output):
            sys.stdout.flush()
        sys.stdout, sys.stderr = saved  # for a caller in the same process (the tests)


def _main(argv: list[str] | None, ctx_state: State) -> None:
    try:
        run = fast_command(sys.argv[1:] if argv is None else list(argv), ctx_state)
        rc = _run_fast(run) if run is not None else _run_click(argv, ctx_state)
    except PatchkitError as err:
        from .render import print_json, render_error

        if ctx_state.json:
            result = getattr(err, "result", None)
            payload = dict(result.to_json()) if result is not None else {}
            payload.update(ok=False, error=err.to_dict())
            print_json(payload)
        render_error(None, err)
        if ctx_state.debug:
            import traceback

            traceback.print_exc()
        sys.exit(err.exit_code)
    except Exception as exc:  # the "bug" exit: a traceback only with --debug
        if ctx_state.debug or os.environ.get("PATCHKIT_DEBUG"):
            import traceback

            traceback.print_exc()
        sys.stderr.write(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "this is a bug in patchkit; rerun with --debug for the traceback and report it\n"
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(rc or 0)

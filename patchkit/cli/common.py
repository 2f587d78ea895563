"""Options and look-ups shared by the commands.

click is imported by the functions that build options, not at the top: the fast path of
:mod:`patchkit.cli.main` runs apply and rollback without it. It reads the options of
:func:`target_options` and :func:`json_option` from :data:`TARGET_FAST_OPTIONS`, which must
say the same as those functions (tests/test_startup.py compares them).
"""

from __future__ import annotations

import os

from ..errors import UsageError

TYPE_CHECKING = False  # typing's own flag: `patchkit --version` imports neither typing nor pathlib
if TYPE_CHECKING:  # the catalog pulls in tomlkit: loaded only by commands that read it
    from typing import Any, Callable, Dict, Tuple

    import click

    from ..catalog import Catalog
    from ..targets import Target

    #: An option as the fast path reads it: option string -> (parameter, kind, default),
    #: kind one of "flag", "value", "float", "multiple" (a repeatable value, kept in a tuple),
    #: "once" (a value to give once: given again, every value is kept in a tuple for the
    #: command to refuse, see :func:`one_value`).
    FastOptions = Dict[str, Tuple[str, str, Any]]

#: :func:`target_options` and :func:`json_option` for the fast path. ``ssh_options``,
#: ``ssh_program`` and ``as_json`` also set :class:`State` as their click callbacks do.
TARGET_FAST_OPTIONS: FastOptions = {
    "--target": ("target", "once", None),
    "-t": ("target", "once", None),
    "--root": ("roots", "multiple", ()),
    "--python": ("python", "value", None),
    "--lock-timeout": ("lock_timeout", "float", 30.0),
    "--ssh-option": ("ssh_options", "multiple", ()),
    "--ssh-program": ("ssh_program", "value", None),
    "--json": ("as_json", "flag", False),
}


class State:
    """Per-invocation settings from the global options.

    A plain class, not a dataclass: the generated methods would cost about a millisecond at
    every start, and nothing compares or prints a State."""

    def __init__(self, catalog_dir: str | None = None, config_path: str | None = None,
                 debug: bool = False, json: bool = False, ssh_options: tuple[str, ...] = (),
                 ssh_program: str | None = None) -> None:
        self.catalog_dir = catalog_dir
        self.config_path = config_path
        self.debug = debug
        self.json = json
        self.ssh_options = ssh_options
        self.ssh_program = ssh_program
        self._config: Any = None
        self._catalog: Catalog | None = None

    def config(self) -> Any:
        if self._config is None:
            path = self.config_path or os.environ.get("PATCHKIT_CONFIG")
            from pathlib import Path

            if path is None and Path("patchkit.toml").is_file():
                path = "patchkit.toml"
            if path is not None:
                from ..catalog.config import load_config

                self._config = load_config(Path(path))
        return self._config

    def catalog(self) -> Catalog:
        if self._catalog is None:
            location = self.catalog_dir
            cfg = self.config()
            if location is None and cfg is not None and getattr(cfg, "catalog", None):
                location = str(cfg.catalog)
            from pathlib import Path

            from ..catalog import Catalog

            self._catalog = Catalog.open(Path(location)) if location else Catalog.discover()
            for name in self._catalog.shadowed():
                import sys

                sys.stderr.write(f"warning: {name} in {self._catalog.manifests_dir} replaces "
                                 "the shipped fix of the same name (rename yours to use both)\n")
        return self._catalog

    def target(self, target: str | tuple[str, ...] | None, roots: tuple[str, ...],
               python: str | None) -> Target:
        if isinstance(target, tuple):  # --target given more than once (see one_value)
            raise given_twice("--target", target)
        from ..targets import resolve_target  # here: `patchkit --version` needs no model

        found = resolve_target(
            target,
            roots,
            python=python,
            config=self.config(),
            ssh_options=self.ssh_options,
            ssh_program=self.ssh_program,
        )
        how = getattr(found, "found", "")
        if how:  # a target the user did not name as a directory: say which one it is
            import sys

            sys.stderr.write(f"target: {found.roots['sglang']} ({how})\n")
        return found


def __getattr__(name: str) -> Any:
    if name == "pass_state":  # built on first use, so importing this module needs no click
        import click

        globals()["pass_state"] = click.make_pass_decorator(State, ensure=True)
        return globals()["pass_state"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lazy_command(module: str, name: str, build: Callable[[], Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds a command module's click command (``build()``) on
    the first use of ``COMMANDS`` or ``name``, so the fast path never imports click."""
    import sys

    namespace = sys.modules[module].__dict__

    def __getattr__(attr: str) -> Any:
        if attr in ("COMMANDS", name):
            command = build()
            namespace.update({"COMMANDS": [command], name: command})
            return namespace[attr]
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")

    return __getattr__


def apply_fast_state(state: State, params: Dict[str, Any]) -> None:
    """What the click callbacks of the ssh and json options do to ``state``, for the fast path;
    the options kept on the state (``expose_value=False``) are taken out of ``params``."""
    state.ssh_options = tuple(params.pop("ssh_options"))
    program = params.pop("ssh_program")
    if program is not None:
        state.ssh_program = program
    if params["as_json"]:
        state.json = True


def json_option(f: Callable) -> Callable:
    import click

    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(State).json = True
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=True,
        callback=callback,
        help="Print a machine-readable result on stdout.",
    )(f)


def _ssh_options(f: Callable) -> Callable:
    """``--ssh-option``/``--ssh-program``: kept on :class:`State`, so commands need no new parameters."""
    import click

    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        state = ctx.ensure_object(State)
        if param.name == "ssh_options":
            state.ssh_options = tuple(value)
        elif value is not None:
            state.ssh_program = value
        return value

    f = click.option(
        "--ssh-program",
        "ssh_program",
        metavar="PROGRAM",
        expose_value=False,
        callback=keep,
        help="The ssh client to run for a remote target instead of `ssh` (same arguments).",
    )(f)
    return click.option(
        "--ssh-option",
        "ssh_options",
        multiple=True,
        metavar="KEY=VALUE",
        expose_value=False,
        callback=keep,
        help="An ssh_config setting for a remote target, passed as `ssh -o KEY=VALUE`. Repeatable.",
    )(f)


def given_twice(option: str, values: tuple[str, ...]) -> UsageError:
    """The error for an option that takes one value given more than once."""
    shown = " and ".join(repr(v) for v in values)
    return UsageError(
        f"{option} given {len(values)} times ({shown}); a run works on one target: "
        f"give {option} once (run patchkit once per target)",
        option=option,
    )


def one_value(ctx: Any, param: Any, values: tuple[str, ...]) -> str | tuple[str, ...] | None:
    """The click callback of an option read as ``multiple`` so that a second value is seen
    instead of silently replacing the first (the fast path's kind ``once``): one value as
    itself, several as a tuple that :meth:`State.target` refuses (there, once every option
    is read, so ``--json`` anywhere on the line gives the JSON error)."""
    if len(values) > 1:
        return tuple(values)
    return values[0] if values else None


def target_options(f: Callable) -> Callable:
    import click

    f = _ssh_options(f)
    f = click.option(
        "--lock-timeout",
        type=float,
        default=30.0,
        show_default=True,
        help="Seconds to wait for another patchkit run on the same target.",
    )(f)
    f = click.option(
        "--python",
        "python",
        metavar="PATH",
        help="Interpreter on the target to verify with (e.g. the production venv's python).",
    )(f)
    f = click.option(
        "--root",
        "roots",
        multiple=True,
        metavar="NAME=PATH",
        help="An extra named root of the target, e.g. --root serve=/root. Repeatable.",
    )(f)
    f = click.option(
        "--target",
        "-t",
        multiple=True,
        callback=one_value,
        metavar="PATH|ssh://HOST/PATH|NAME",
        help="SGLang checkout or installed package, a remote one, or a target named in patchkit.toml.",
    )(f)
    return f


def require_names(names: tuple[str, ...], what: str) -> list[str]:
    if not names:
        raise UsageError(f"name at least one fix to {what}; `patchkit list` shows them")
    return list(names)


def emit_result(result: Any, as_json: bool, *, show_diff: bool | None = None,
                verbose: bool = False) -> int:
    """Print an operation's result as JSON or for people; the exit code of a success.

    ``show_diff`` None lets the renderer decide (a dry run changing few files shows it)."""
    from . import render

    if as_json:
        render.print_json(result.to_json())
    else:
        render.render_result(None, result, show_diff=show_diff, verbose=verbose)
    return 0

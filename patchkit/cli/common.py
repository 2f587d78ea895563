"""Options and look-ups shared by the commands: the per-run :class:`State`, the target and
``--json`` options."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from ..errors import UsageError

if TYPE_CHECKING:  # the catalog pulls in tomlkit: loaded only by commands that read it
    from ..catalog import Catalog
    from ..targets import Target


class State:
    """Per-invocation settings from the global options."""

    def __init__(self) -> None:
        self.catalog_dir: str | None = None
        self.config_path: str | None = None
        self.debug = self.json = False
        self.ssh_options: tuple[str, ...] = ()
        self.ssh_program: str | None = None
        self._config: Any = None
        self._catalog: Catalog | None = None
        self._targets: dict[Any, Target] = {}  # each target resolved (and said) once per run
        # what a `--json` error object names, however early the failure (docs/cli.md)
        self.op: str | None = None
        self.target_given: str | None = None
        self.writes = False  # the engine run under way writes to the target (what Ctrl-C says)
        self.answered = False  # ... and its target answered it (a remote one: it ran there)
        self.leaves: str | None = None  # what an interrupt leaves, said by a command on no target
        self.hooks: tuple[str, ...] = ()  # the hooks to run after the change (--after-cmd, ...)
        self.committed = False  # the change is complete (the engine answered it so)
        self.began = False  # the command's own function was called

    def named(self, ctx: Any = None) -> dict[str, str | None]:
        """``op`` and ``target`` of a ``--json`` error: the command (from click's context of a
        usage error, when ``--json`` was not read yet) and the target as given (``--target`` is
        read first, however early the failure)."""
        op = self.op
        if op is None and ctx is not None:
            op = ctx.command_path.partition(" ")[2] or None
        return {"op": op, "target": self.target_given}

    def config(self) -> Any:
        if self._config is None:
            path = self.config_path or os.environ.get("PATCHKIT_CONFIG")
            if path is None and Path("patchkit.toml").is_file():
                path = "patchkit.toml"
            if path is not None:
                from ..catalog.config import load_config

                self._config = load_config(Path(path))
        return self._config

    def catalog(self) -> Catalog:
        if self._catalog is None:
            from ..catalog import Catalog

            # the order (--catalog, $PATCHKIT_CATALOG, patchkit.toml, discovery) is find's
            self._catalog = Catalog.find(self.catalog_dir, config=self.config())
            for name in self._catalog.shadowed():
                sys.stderr.write(f"warning: {name} in {self._catalog.manifests_dir} replaces "
                                 "the shipped fix of the same name (rename yours to use both)\n")
        return self._catalog

    def resolved(self) -> Target | None:
        """The target this run resolved last (None: none yet), for what an interrupt says."""
        return next(reversed(self._targets.values()), None)

    def target(self, target: str | tuple[str, ...] | None, roots: tuple[str, ...],
               python: str | None) -> Target:
        if isinstance(target, tuple):  # --target given more than once (see _one_target)
            shown = " and ".join(repr(v) for v in target)
            raise UsageError(f"--target given {len(target)} times ({shown}); a run works on one "
                             "target: give --target once (run patchkit once per target)",
                             option="--target")
        key = (target, roots, python)
        if key in self._targets:  # apply's hooks ask again after the change: the same target
            return self._targets[key]
        from ..targets import resolve_target  # here: `patchkit --version` needs no model

        found = resolve_target(target, roots, python=python, config=self.config(),
                               ssh_options=self.ssh_options, ssh_program=self.ssh_program)
        how = getattr(found, "found", "")
        if how:  # a target the user did not name as a directory: say which one it is
            sys.stderr.write(f"target: {found.roots['sglang']} ({how})\n")
        self._targets[key] = found
        return found


def run_op(state: State, where: dict[str, Any], doing: str, as_json: bool, call: Callable, *args: Any,
         **options: Any) -> Any:
    """``call(catalog, target, *args, lock_timeout=..., **options)`` on the target the options name."""
    from . import render  # here: `patchkit --version` loads this module and runs nothing

    target = state.target(where["target"], where["roots"], where["python"])
    state.writes = options.get("dry_run") is False  # the ops that write take dry_run; no other
    from ..engine.store import Store

    with render.busy(f"{doing} {target.description}", quiet=as_json) as progress, \
            Store.telling(progress.update):  # a wait for the target's lock is said, not silent
        result = call(state.catalog(), target, *args, lock_timeout=where["lock_timeout"], **options)
    state.answered = True
    if state.writes and getattr(result, "ok", False):  # what an interrupt from here says
        from ..hooks import changed_fixes

        state.committed = bool(result.txn or changed_fixes(result))
    return result


pass_state = click.make_pass_decorator(State, ensure=True)

#: A command on a target that a message suggests running next (``patchkit undo``, ``patchkit
#: rollback --force FIX``), up to the end of its quote or clause.
SUGGESTS = re.compile(r"\bpatchkit (?:apply|rollback|undo|sync|verify|status|log)\b([^`\n;]*)")


def suggests(words: str, named_by: str) -> bool:
    """Whether ``words`` suggest a patchkit command on a target that does not name it already
    (with ``named_by``: ``--target`` for one target, ``--inventory`` for a fleet's host): the
    next step then needs this run's options, which a ``note:`` line gives."""
    return any(named_by not in found.group(1) for found in SUGGESTS.finditer(words))


class ReleaseName(click.ParamType):
    """An SGLang release on the command line: ``0.5.23``, or as its tag, ``v0.5.23``; every
    command taking one reads it through this (``upstream.release_name``)."""

    name = "release"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        from ..errors import UsageError
        from ..upstream import release_name  # here: `patchkit --version` needs no upstream

        try:
            return release_name(str(value))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


RELEASE = ReleaseName()


def json_option(f: Callable) -> Callable:
    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:  # the command's name too, for an error before it runs (`upstream checkout`)
            state = ctx.ensure_object(State)
            state.json = True
            state.op = state.op or ctx.command_path.partition(" ")[2] or None
        return value

    return click.option("--json", "as_json", is_flag=True, callback=callback,
                        help="Print a machine-readable result on stdout.")(f)


def _one_target(ctx: Any, param: Any, values: tuple[str, ...]) -> str | tuple[str, ...] | None:
    """``--target``, read as ``multiple`` so a second value is not silently dropped: several
    come as a tuple that :meth:`State.target` refuses once ``--json`` is known. One is kept on
    the :class:`State` for a ``--json`` error (the option is eager: read before any other)."""
    if len(values) > 1:
        return tuple(values)
    if values:
        ctx.ensure_object(State).target_given = values[0]
    return values[0] if values else None


def _keep_ssh(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--ssh-option``/``--ssh-program`` are kept on :class:`State`, not passed to commands."""
    state = ctx.ensure_object(State)
    if param.name == "ssh_options":
        state.ssh_options = tuple(value)
    elif value is not None:
        state.ssh_program = value
    return value


#: ``--target``, ``--root``, ``--python``, ``--lock-timeout`` and the ssh options.
TARGET_OPTIONS = (
    click.option("--target", "-t", multiple=True, callback=_one_target, is_eager=True, metavar="PATH|ssh://HOST/PATH|NAME",
                 help="SGLang checkout or installed package, a remote one, or a target named in patchkit.toml."),
    click.option("--root", "roots", multiple=True, metavar="NAME=PATH",
                 help="An extra named root of the target, e.g. --root serve=/root. Repeatable."),
    click.option("--python", "python", metavar="PATH",
                 help="The target's Python (e.g. the production venv's python): it runs the engine "
                      "on a remote target, and the fixes' Python checks (apply, verify)."),
    click.option("--lock-timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
                 help="Seconds to wait for another patchkit run on the same target."),
    click.option("--ssh-option", "ssh_options", multiple=True, metavar="KEY=VALUE", expose_value=False,
                 callback=_keep_ssh,
                 help="An ssh_config setting for a remote target, passed as `ssh -o KEY=VALUE`. Repeatable."),
    click.option("--ssh-program", "ssh_program", metavar="PROGRAM", expose_value=False, callback=_keep_ssh,
                 help="The ssh client to run for a remote target instead of `ssh` (same arguments)."),
)


def write_options(where: str = "target", note: str = "") -> tuple[Callable[..., Any], ...]:
    """``--commit`` and ``--no-git`` of the commands that write fixes to ``where`` (a target or
    the hosts); ``note`` says when ``--commit`` applies (plan: only to apply)."""
    return (click.option("--commit", "commit", is_flag=True,
                         help=f"Record each fix as a commit (Patchkit-Fix trailers) in the {where}'s "
                              f"git checkout{note}."),
            click.option("--no-git", "no_git", is_flag=True,
                         help=f"Run no git on the {where} (a container build): no clean check against HEAD."))


#: ``--force`` of the commands that upgrade fixes (apply, sync).
FORCE_UPGRADE = click.option("--force", is_flag=True, help="Upgrade even when the applied version's "
                             "files changed since (discarding those changes).")


def _keep_global(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--catalog`` or ``--config`` after the command's name (``patchkit list --catalog
    DIR``): the same as before it, and it wins over one given there."""
    if value is not None:
        setattr(ctx.ensure_object(State), "catalog_dir" if param.name == "catalog" else
                "config_path", value)
    return value


#: ``--catalog`` and ``--config`` on every command, as the group takes them (options may follow
#: the command: the note after an error repeats them there, docs/cli.md).
CATALOG_OPTION = click.option("--catalog", metavar="DIR", expose_value=False, callback=_keep_global,
                              is_eager=True, help="Catalog directory (as `patchkit --catalog DIR`).")
CONFIG_OPTION = click.option("--config", metavar="FILE", expose_value=False, callback=_keep_global,
                             is_eager=True, help="Project config (as `patchkit --config FILE`).")


def command(name: str, *params: Callable) -> Callable[[Callable], click.Command]:
    """The click command NAME: ``params`` (click.argument and click.option decorators, in the
    order --help lists them), then ``--json``, ``--config`` and ``--catalog``; the function gets the
    :class:`State` first."""

    def decorate(f: Callable) -> click.Command:
        f = CATALOG_OPTION(CONFIG_OPTION(json_option(pass_state(f))))
        for param in reversed(params):
            f = param(f)
        return click.command(name)(f)

    return decorate

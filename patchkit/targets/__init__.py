"""Targets: named roots plus the interpreter verifications run with, where :meth:`Target.run`
executes one engine request (docs/design.md); and how a command line names one."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence

from ..engine.contract import PRIMARY_ROOT, no_sglang
from ..engine.paths import interpreter_sglang, python_root, sglang_tree_root
from ..engine.recordbase import Record, record_dataclass
from ..errors import TargetError, UsageError

#: An ssh_config setting, as ``--ssh-option`` and a named target's ``ssh_options`` take it:
#: ``KEY=VALUE`` (or ``KEY VALUE``), passed as ``ssh -o``; never another flag or a destination.
SSH_SETTING = re.compile(r"[A-Za-z][A-Za-z0-9]*(=| +)[^\0\n\r]+")


class Target(Protocol):
    """Where a request runs. Read-only members, so frozen dataclasses satisfy it."""

    @property
    def description(self) -> str: ...
    @property
    def roots(self) -> Mapping[str, str]: ...
    @property
    def python(self) -> str | None: ...
    @property
    def is_remote(self) -> bool: ...

    def run(self, request: dict[str, Any]) -> dict[str, Any]: ...


@record_dataclass(frozen=True)
class LocalTarget(Record):
    """A target on this machine: the engine runs in-process. ``found``: how the ``sglang`` root
    was found when not given as a directory ("found from the working directory")."""

    roots: Mapping[str, str]
    python: str | None = None
    description: str = ""
    is_remote: bool = field(default=False, init=False)
    found: str = ""

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        from .. import engine

        return engine.run(dict(request, roots=dict(self.roots), python=self.python))

    @contextmanager
    def hold(self, lock_timeout: float, op: str) -> Iterator[Hold]:
        """The state root's lock, held by this process for the block: the runs on this target
        inside it take it from there (``api.held``)."""
        from ..engine.store import Store

        store = Store(self.roots[state_root_of(self.roots)])
        with store.hold(lock_timeout, op) as held:
            yield Hold(store if held else None)


class Hold:
    """A target's lock held across a change, its hooks and their undo (``api.held``); ``held``
    False where it is not (a remote target: each run locks in its own ssh session)."""

    def __init__(self, store: Any = None) -> None:
        self._store = store

    @property
    def held(self) -> bool:
        return self._store is not None

    def hooks_running(self, running: bool) -> None:
        """While the hooks run, read-only runs read without waiting for the lock; not while
        an undo writes (docs/state.md, "Lock")."""
        if self._store is not None:
            (self._store.begin_hooks if running else self._store.end_hooks)()


def state_root_of(roots: Mapping[str, str]) -> str:
    """The root that holds ``.patchkit/``: ``sglang`` when present, else the first root."""
    if PRIMARY_ROOT in roots:
        return PRIMARY_ROOT
    if not roots:
        raise UsageError("the target has no roots; pass --target PATH or --root NAME=PATH")
    return next(iter(roots))


def parse_root_option(value: str) -> tuple[str, str]:
    """``NAME=PATH`` from ``--root``; NAME as a manifest names a root."""
    from ..catalog.reader import ROOT_NAME_RE  # here: the catalog imports this module

    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise UsageError(f"bad --root {value!r}: expected NAME=PATH, e.g. --root serve=/root",
                         option="--root")
    if not ROOT_NAME_RE.match(name.strip()):
        raise UsageError(f"bad --root {value!r}: {name.strip()!r} is not a root name (letters, "
                         "digits, '_', '.', '-', as manifests name roots)", option="--root")
    return name.strip(), path


def _root_options(values: Sequence[str], target: str | None) -> dict[str, str]:
    """The ``--root`` values by name: a name given twice, or the sglang root beside ``--target``
    (which is that root), is refused rather than one value silently winning."""
    out: dict[str, str] = {}
    for value in values:
        name, path = parse_root_option(value)
        if name in out:
            raise UsageError(f"--root {name} given twice ({out[name]} and {path}); give each root "
                             "once", option="--root")
        out[name] = path
    if PRIMARY_ROOT in out and target is not None:
        raise UsageError(f"--root {PRIMARY_ROOT}={out[PRIMARY_ROOT]} and --target {target} both "
                         f"name the {PRIMARY_ROOT} root; give it once (--target)", option="--root")
    return out


def ssh_option_args(options: Sequence[str]) -> tuple[str, ...]:
    """``--ssh-option Key=Value`` values as ``ssh -o`` arguments: only settings, so a value never
    becomes another ssh flag or the destination."""
    for option in options:
        if not SSH_SETTING.fullmatch(option):
            raise UsageError(
                f"bad --ssh-option {option!r}: expected an ssh_config setting as KEY=VALUE, "
                "e.g. --ssh-option IdentityFile=~/.ssh/deploy or --ssh-option ProxyJump=bastion",
                option="--ssh-option",
            )
    return tuple(word for option in options for word in ("-o", option))


def _local_roots(roots: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in roots.items():
        full = os.path.abspath(os.path.expanduser(path))
        if not os.path.isdir(full):
            what = "does not exist" if not os.path.exists(full) else "is not a directory"
            how = "--target PATH" if name == PRIMARY_ROOT else f"--root {name}=PATH"
            if (name == PRIMARY_ROOT and os.path.isfile(full) and os.access(full, os.X_OK)
                    and os.path.basename(full).startswith("python")):  # an interpreter
                how += f", or this interpreter's installed sglang as --target python:{full}"
            raise TargetError(f"root {name!r} at {full} {what}; pass the right directory with "
                              f"{how}", root=name, path=full)
        out[name] = full
    return out


def find_enclosing_sglang(start: str) -> str | None:
    """The SGLang tree that holds ``start``, found walking up as git finds its repository."""
    here = Path(os.path.abspath(start))
    for path in (here, *here.parents):
        root = sglang_tree_root(str(path))
        if root is not None:
            return root
    return None


def _local_sglang(spec: str, python: str | None) -> tuple[str, str | None, str]:
    """(sglang root, python, how found) for a local ``--target``: a directory, a venv root or
    ``python:INTERPRETER`` (both: that interpreter's installed sglang)."""
    if spec.startswith("python:"):
        root, interpreter = python_root(spec)
        return root, python or interpreter, f"the sglang of {interpreter}"
    full = os.path.abspath(os.path.expanduser(spec))
    interpreter = os.path.join(full, "bin", "python")
    is_venv = os.path.isfile(os.path.join(full, "pyvenv.cfg")) and os.path.exists(interpreter)
    if not is_venv or sglang_tree_root(full) is not None:
        return spec, python, ""
    return interpreter_sglang(interpreter), python or interpreter, f"the sglang of the venv {full}"


def resolve_target(target: str | None, extra_roots: Sequence[str] = (), *, python: str | None = None,
                   config: Any = None, ssh_options: Sequence[str] = (),
                   ssh_program: str | None = None) -> Target:
    """Build a target from command-line pieces and the project config (docs/api.md)."""
    cli_ssh = ssh_option_args(ssh_options)
    given = _root_options(extra_roots, target)
    named = _named_target(target, config)
    roots: dict[str, str] = {}
    spec, found = None, ""
    if target is None and named is None:
        enclosing = None if PRIMARY_ROOT in given else find_enclosing_sglang(os.getcwd())
        if enclosing is not None:
            roots[PRIMARY_ROOT], found = enclosing, "found from the working directory"
        elif not extra_roots:  # only --root: a tree that is not SGLang; a run needs only its roots
            raise UsageError(
                "no target given; pass --target PATH (an SGLang checkout), --target "
                "ssh://host/path, or the name of a target in patchkit.toml, or run patchkit "
                "inside an SGLang checkout (a tree that is not SGLang: --root NAME=PATH)"
            )
    elif named is not None:
        roots.update({PRIMARY_ROOT: named.path, **named.roots})
        python = python or named.python
        if named.host:
            from .transport import SshSpec  # here: a local target never loads the SSH code

            spec = SshSpec(named.host, named.user, named.port,
                           (*cli_ssh, *ssh_option_args(named.ssh_options)),
                           ssh_program or named.ssh_program or "ssh")
    elif target is not None and target[:6].lower() == "ssh://":
        from .remote import parse_ssh_url

        spec, roots[PRIMARY_ROOT] = parse_ssh_url(target)
        if cli_ssh or ssh_program:
            spec = replace(spec, options=cli_ssh, program=ssh_program or spec.program)
    else:
        assert target is not None  # target None without a named target is the first branch
        roots[PRIMARY_ROOT], python, found = _local_sglang(target, python)
    roots.update(given)

    if spec is not None:
        from .remote import RemoteTarget

        options = ["--target", target if target is not None else config.default_target]
        for flag, values in (("--root", extra_roots), ("--ssh-option", ssh_options)):
            options += [word for value in values for word in (flag, value)]
        options += ["--ssh-program", ssh_program] if ssh_program else []
        return RemoteTarget(spec, roots, python, cli_options=tuple(options))
    if cli_ssh or ssh_program:
        raise UsageError(
            f"--ssh-option and --ssh-program apply to remote targets only, and {target!r} is a "
            "local path; give an ssh://host/path target or drop them",
            option="--ssh-option" if cli_ssh else "--ssh-program",
        )
    if named is not None:
        roots[PRIMARY_ROOT], python, found = _local_sglang(roots[PRIMARY_ROOT], python)
    elif target is not None and "/" not in target and not target.startswith("python:") \
            and not os.path.exists(target):
        names = sorted(getattr(config, "targets", None) or {})
        raise TargetError(f"--target {target}: no such directory, and no target of that name in "
                          + (f"patchkit.toml (its targets: {', '.join(names)})" if names else
                             "patchkit.toml (it names none)" if config is not None else
                             "a patchkit.toml (none was found)")
                          + "; give an SGLang checkout's path or a target's name",
                          root=PRIMARY_ROOT, path=os.path.abspath(target))
    return _local_target(roots, python, found)


def _named_target(target: str | None, config: Any) -> Any:
    """The config's target named ``target``, or its default target when none is given."""
    if config is None:
        return None
    if target and target in getattr(config, "targets", {}):
        return config.targets[target]
    if target is None and getattr(config, "default_target", None):
        return config.targets[config.default_target]
    return None


def _local_target(roots: Mapping[str, str], python: str | None, found: str) -> LocalTarget:
    """The local target of ``roots``, each an existing directory; ``sglang`` must hold SGLang."""
    local = _local_roots(roots)
    if PRIMARY_ROOT in local and sglang_tree_root(local[PRIMARY_ROOT]) is None:
        path = local[PRIMARY_ROOT]
        raise TargetError(no_sglang(path, "pass --target with an SGLang checkout, the site-packages "
                                    "directory that holds sglang, a venv root, or "
                                    "python:/path/to/bin/python"), root=PRIMARY_ROOT, path=path)
    desc = ", ".join(f"{n}={p}" for n, p in local.items())
    return LocalTarget(roots=local, python=python, description=desc, found=found)

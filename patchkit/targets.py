"""Targets: where fixes are applied.

A target is a set of named roots (``sglang`` = the checkout or installed package, ``serve`` = the
folder of the serve scripts, ...) plus the Python interpreter that verifications run with. Every
target implements the same tiny protocol, :meth:`Target.run`, which executes one engine request
(see docs/design.md) next to the files and returns the engine's result. A local target runs the
engine in-process; a remote one (``patchkit.remote``) ships it over one SSH session. Everything
above this layer is the same for both.
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from typing import Any, Mapping, Protocol, Sequence

from .errors import TargetError, UsageError
from .model import Frozen, record

PRIMARY_ROOT = "sglang"
_SSH_SETTING = re.compile(r"[A-Za-z][A-Za-z0-9]*(=| +)[^\0\n\r]+")


class Target(Protocol):
    description: str
    roots: Mapping[str, str]
    python: str | None
    is_remote: bool

    def run(self, request: dict[str, Any]) -> dict[str, Any]: ...


@record
class LocalTarget(Frozen):
    """A target on this machine: the engine runs in-process (a frozen dataclass, see model)."""

    roots: Mapping[str, str]
    python: str | None = None
    description: str = ""
    is_remote: bool = field(default=False, init=False)

    def __init__(self, roots: Mapping[str, str], python: str | None = None,
                 description: str = "") -> None:
        self.__dict__.update(roots=roots, python=python, description=description,
                             is_remote=False)

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        from . import engine

        return engine.run(dict(request, roots=dict(self.roots), python=self.python),
                          cache_dir=user_cache_dir())


def user_cache_dir() -> str:
    """patchkit's directory in the user's cache (XDG), for caches keyed by content."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "patchkit")


def state_root_of(roots: Mapping[str, str]) -> str:
    """The root that holds ``.patchkit/``: ``sglang`` when present, else the first root."""
    if PRIMARY_ROOT in roots:
        return PRIMARY_ROOT
    if not roots:
        raise UsageError("the target has no roots; pass --target PATH or --root NAME=PATH")
    return next(iter(roots))


def parse_root_option(value: str) -> tuple[str, str]:
    """``NAME=PATH`` from ``--root``."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise UsageError(
            f"bad --root {value!r}: expected NAME=PATH, e.g. --root serve=/root",
            option="--root",
        )
    return name.strip(), path


def ssh_option_args(options: Sequence[str]) -> tuple[str, ...]:
    """``--ssh-option Key=Value`` values as ``ssh`` arguments (``-o Key=Value`` each).

    Only ``ssh -o`` settings are taken, so a value can never become another ssh flag or the
    destination; anything else (``-F``, ``-i``, ...) has an ``-o`` form (``IdentityFile=...``).
    """
    args: list[str] = []
    for option in options:
        if not _SSH_SETTING.fullmatch(option):
            raise UsageError(
                f"bad --ssh-option {option!r}: expected an ssh_config setting as KEY=VALUE, "
                "e.g. --ssh-option IdentityFile=~/.ssh/deploy or --ssh-option ProxyJump=bastion",
                option="--ssh-option",
            )
        args += ["-o", option]
    return tuple(args)


def _local_roots(roots: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in roots.items():
        full = os.path.abspath(os.path.expanduser(path))
        if not os.path.isdir(full):
            what = "does not exist" if not os.path.exists(full) else "is not a directory"
            raise TargetError(
                f"root {name!r} at {full} {what}; pass the right directory with "
                f"--target PATH or --root {name}=PATH",
                root=name,
                path=full,
            )
        out[name] = full
    return out


def resolve_target(
    target: str | None,
    extra_roots: Sequence[str] = (),
    *,
    python: str | None = None,
    config: Any = None,
    ssh_options: Sequence[str] = (),
    ssh_program: str | None = None,
) -> Target:
    """Build a target from command-line pieces and the project config.

    ``target`` is a local path, an ``ssh://[user@]host[:port]/path`` URL, or the name of a target
    in ``patchkit.toml``. ``extra_roots`` are ``NAME=PATH`` strings (paths on the target's host).
    ``ssh_options`` are ``ssh -o`` settings (``Key=Value``) and ``ssh_program`` the ssh client
    for a remote target; they come before (and so win over) a named target's own, because ssh
    keeps the first value it sees. Giving either for a local target is a usage error.
    """
    cli_ssh = ssh_option_args(ssh_options)
    named = None
    if target and config is not None and target in getattr(config, "targets", {}):
        named = config.targets[target]
    elif target is None and config is not None and getattr(config, "default_target", None):
        named = config.targets[config.default_target]
    if target is None and named is None:
        raise UsageError(
            "no target given; pass --target PATH (an SGLang checkout), --target ssh://host/path, "
            "or the name of a target in patchkit.toml"
        )

    roots: dict[str, str] = {}
    spec = None
    if named is not None:
        roots[PRIMARY_ROOT] = named.path
        roots.update(named.roots)
        python = python or named.python
        if named.host:
            from .transport import SshSpec

            spec = SshSpec(
                host=named.host,
                user=named.user,
                port=named.port,
                options=(*cli_ssh, *named.ssh_options),
                program=ssh_program or named.ssh_program or "ssh",
            )
    elif target is not None and target[:6].lower() == "ssh://":
        from .remote import parse_ssh_url

        spec, path = parse_ssh_url(target)
        if cli_ssh or ssh_program:
            from dataclasses import replace

            spec = replace(spec, options=cli_ssh, program=ssh_program or spec.program)
        roots[PRIMARY_ROOT] = path
    else:
        assert target is not None
        roots[PRIMARY_ROOT] = target

    for item in extra_roots:
        name, path = parse_root_option(item)
        roots[name] = path

    if spec is None and (cli_ssh or ssh_program):
        raise UsageError(
            f"--ssh-option and --ssh-program apply to remote targets only, and {target!r} is a "
            "local path; give an ssh://host/path target or drop them",
            option="--ssh-option" if cli_ssh else "--ssh-program",
        )
    if spec is not None:
        from .remote import RemoteTarget

        named_as = target if target is not None else config.default_target
        options = ["--target", named_as]
        for item in extra_roots:
            options += ["--root", item]
        for setting in ssh_options:
            options += ["--ssh-option", setting]
        if ssh_program:
            options += ["--ssh-program", ssh_program]
        return RemoteTarget(spec, roots, python, cli_options=tuple(options))
    local = _local_roots(roots)
    desc = ", ".join(f"{n}={p}" for n, p in local.items())
    return LocalTarget(roots=local, python=python, description=desc)

"""Targets: where fixes are applied.

A target is a set of named roots (``sglang`` = the checkout or installed package, ``serve`` = the
folder of the serve scripts, ...) plus the Python interpreter that verifications run with. Every
target implements the same tiny protocol, :meth:`Target.run`, which executes one engine request
(see docs/design.md) next to the files and returns the engine's result. A local target runs the
engine in-process; a remote one (``patchkit.targets.remote``) ships it over one SSH session. Everything
above this layer is the same for both.
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from typing import Any, Mapping, Protocol, Sequence

from ..errors import TargetError, UsageError
from ..catalog.model import Frozen, record

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
    """A target on this machine: the engine runs in-process (a frozen dataclass, see model).

    ``found`` says how the ``sglang`` root was found when the user did not name it as a
    directory ("found from the working directory", "the sglang of /venv/bin/python"); empty
    when it was given."""

    roots: Mapping[str, str]
    python: str | None = None
    description: str = ""
    is_remote: bool = field(default=False, init=False)
    found: str = ""

    def __init__(self, roots: Mapping[str, str], python: str | None = None,
                 description: str = "", found: str = "") -> None:
        self.__dict__.update(roots=roots, python=python, description=description,
                             is_remote=False, found=found)

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        from .. import engine

        return engine.run(dict(request, roots=dict(self.roots), python=self.python),
                          cache_dir=user_cache_dir())


def user_cache_dir() -> str:
    """patchkit's cache directory (:func:`patchkit.cache.cache_dir`)."""
    from ..cache import cache_dir

    return str(cache_dir())


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


def sglang_tree_root(path: str) -> str | None:
    """The root of the SGLang tree at ``path``: ``path`` when it is a checkout (holds
    ``python/sglang/``) or an installed-package directory (holds ``sglang/__init__.py``), the
    checkout when ``path`` is a checkout's ``python/`` directory; None when it holds neither."""
    from ..engine.paths import CHECKOUT, PACKAGE, detect_layout

    layout = detect_layout(path)
    if layout == CHECKOUT:
        return path
    if layout == PACKAGE:
        parent = os.path.dirname(path)
        if os.path.basename(path) == "python" and detect_layout(parent) == CHECKOUT:
            return parent
        return path
    return None


def find_enclosing_sglang(start: str) -> str | None:
    """The SGLang checkout or installed-package directory that holds ``start``, found by
    walking up from it the way git finds its repository; None outside one."""
    here = os.path.abspath(start)
    while True:
        root = sglang_tree_root(here)
        if root is not None:
            return root
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def venv_python(path: str) -> str | None:
    """``path/bin/python`` when ``path`` is a virtual environment's root (it has
    ``pyvenv.cfg`` and ``bin/python``), else None."""
    python = os.path.join(path, "bin", "python")
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")) and os.path.exists(python):
        return python
    return None


#: Run by the target's interpreter: where it would import ``sglang`` from, without importing
#: it (``find_spec`` of a top-level name only searches ``sys.path``; sglang is slow to import).
_FIND_SGLANG = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "print(json.dumps({'package': list(spec.submodule_search_locations or []) if spec else [],"
    " 'path': [p for p in sys.path if p]}))\n"
)


def interpreter_sglang(python: str) -> str:
    """The root (site-packages or checkout) of the ``sglang`` package ``python`` imports.

    The interpreter itself is asked, so a venv, a conda env, a ``.pth`` or an editable
    install all answer as they would when the server starts."""
    import json
    import subprocess

    if not os.path.exists(python):
        raise TargetError(f"interpreter {python} does not exist; pass the python of the "
                          "environment that runs SGLang (python:/path/to/bin/python)", path=python)
    try:
        proc = subprocess.run([python, "-c", _FIND_SGLANG], capture_output=True, text=True,
                              timeout=120, cwd="/", stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"cannot ask {python} where its sglang package is: {exc}; check that "
                          "it is a working Python interpreter", path=python) from None
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if proc.returncode != 0 or not isinstance(answer, dict):
        raise TargetError(f"cannot ask {python} where its sglang package is: `{python} -c ...` "
                          f"exited {proc.returncode}: {proc.stderr.strip()[-500:] or 'no output'}",
                          path=python)
    looked = ", ".join(answer.get("path") or []) or "an empty sys.path"
    for package in answer.get("package") or []:
        root = sglang_tree_root(os.path.dirname(package))
        if root is not None:
            return root
    raise TargetError(f"no `sglang` package found for {python}: it does not import sglang "
                      f"(looked in its sys.path: {looked}); install SGLang into that "
                      "environment, or pass --target with an SGLang checkout", path=python)


def _local_sglang(spec: str, python: str | None) -> tuple[str, str | None, str]:
    """(the sglang root, the python, how it was found) for a local ``--target``: a directory,
    a venv root or ``python:INTERPRETER`` (both: that interpreter's installed sglang)."""
    if spec.startswith("python:"):
        given = spec[len("python:"):]
        if os.sep not in given:  # a command name (python3): the one on PATH, as a shell runs it
            import shutil

            given = shutil.which(given) or given
        interpreter = os.path.abspath(os.path.expanduser(given))
        return (interpreter_sglang(interpreter), python or interpreter,
                f"the sglang of {interpreter}")
    full = os.path.abspath(os.path.expanduser(spec))
    interpreter = venv_python(full)
    if interpreter is not None and sglang_tree_root(full) is None:
        return (interpreter_sglang(interpreter), python or interpreter,
                f"the sglang of the venv {full}")
    return spec, python, ""


def _no_sglang(path: str) -> TargetError:
    return TargetError(
        f"no `sglang` package found in {path}: looked for {os.path.join(path, 'python', 'sglang')}"
        f"{os.sep} (an SGLang checkout) and {os.path.join(path, 'sglang', '__init__.py')} (an "
        "installed package); pass --target with an SGLang checkout, the site-packages directory "
        "that holds sglang, a venv root, or python:/path/to/bin/python",
        root=PRIMARY_ROOT, path=path)


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
    found = ""
    enclosing = None
    if target is None and named is None:
        enclosing = find_enclosing_sglang(os.getcwd())
        if enclosing is None:
            raise UsageError(
                "no target given; pass --target PATH (an SGLang checkout), --target "
                "ssh://host/path, or the name of a target in patchkit.toml, or run patchkit "
                "inside an SGLang checkout"
            )
        found = "found from the working directory"

    roots: dict[str, str] = {}
    spec = None
    if enclosing is not None:
        roots[PRIMARY_ROOT] = enclosing
    elif named is not None:
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
        roots[PRIMARY_ROOT], python, found = _local_sglang(target, python)

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
    if named is not None and not found:
        roots[PRIMARY_ROOT], python, found = _local_sglang(roots[PRIMARY_ROOT], python)
    local = _local_roots(roots)
    if PRIMARY_ROOT in local and sglang_tree_root(local[PRIMARY_ROOT]) is None:
        raise _no_sglang(local[PRIMARY_ROOT])
    desc = ", ".join(f"{n}={p}" for n, p in local.items())
    return LocalTarget(roots=local, python=python, description=desc, found=found)

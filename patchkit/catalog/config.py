"""The project config, ``patchkit.toml``: named targets, where the catalog is, and whether the
catalog shipped with patchkit is seen beside this one (docs/manifest.md, patchkit.toml)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..engine.contract import PRIMARY_ROOT
from ..targets import SSH_SETTING
from .model import ProjectConfig, TargetConfig
from .reader import (
    ROOT_NAME_RE,
    Ctx,
    check_keys,
    full_key,
    read_data,
    root_name,
    string,
    strings,
    typed,
)

TARGET_KEYS = ("path", "host", "user", "port", "python", "ssh_options", "ssh_program", "roots")
REMOTE_ONLY_KEYS = ("user", "port", "ssh_options", "ssh_program")


def _local_path(base: Path, value: str) -> Path:
    """A path of this machine the config names (``~`` expanded, relative to the config's
    directory), as messages print it: ``sub/..`` and ``./`` taken out (lexically: a symlink
    the user named stays the name they gave)."""
    return Path(os.path.normpath(base / Path(value).expanduser()))


def load_config(path: Path | str) -> ProjectConfig:
    """Read ``patchkit.toml``: named targets, and where the catalog is (relative to the file)."""
    path = Path(path)
    ctx = Ctx(path)
    data = read_data(path, "config")
    check_keys(ctx, data, "", ("catalog", "default_target", "targets", "shipped_fixes", "restarts"), ())
    base = path.parent.resolve()
    catalog = (_local_path(base, string(ctx, data, "", "catalog", nonempty=True))
               if "catalog" in data else None)
    targets = {}
    for name, table in typed(ctx, data, "", "targets", dict, {}).items():
        where = f"targets.{name}"
        if not isinstance(table, dict):
            raise ctx.fail(where, f"target '{name}' must be a table", f"Write it as [{where}]")
        if not ROOT_NAME_RE.match(name):
            raise ctx.fail(where, f"'{name}' is not a target name", "Use letters, digits, "
                           "'_', '.', '-'")
        targets[name] = _build_target(ctx, name, table, base)
    default = string(ctx, data, "", "default_target", None)
    if default is not None and default not in targets:
        raise ctx.fail("default_target", f"default_target '{default}' is not a defined target "
                       f"({', '.join(sorted(targets)) or 'none'})",
                       f"Add [targets.{default}] or fix the name")
    restarts = {}
    for name in typed(ctx, data, "", "restarts", dict, {}):
        if not ROOT_NAME_RE.match(name):
            raise ctx.fail(f"restarts.{name}", f"'{name}' is not a restart name", "Use letters, "
                           "digits, '_', '.', '-'")
        restarts[name] = string(ctx, data["restarts"], "restarts", name, nonempty=True)
    return ProjectConfig(path=path, catalog=catalog, default_target=default, targets=targets,
                         shipped_fixes=typed(ctx, data, "", "shipped_fixes", bool, False),
                         restarts=restarts)


def _build_target(ctx: Ctx, name: str, table: Mapping[str, Any], base: Path) -> TargetConfig:
    where = f"targets.{name}"
    check_keys(ctx, table, where, TARGET_KEYS, ("path",))
    host = string(ctx, table, where, "host", None, nonempty=True)
    if host is None:
        for key in REMOTE_ONLY_KEYS:
            if key in table:
                raise ctx.fail(full_key(where, key), f"'{key}' only applies to a remote target",
                               "Add host = \"...\" or remove it")

    def place(value: str) -> str:
        # A local root is resolved against the config's directory; a remote one is the host's.
        return value if host is not None else str(_local_path(base, value))

    path = place(string(ctx, table, where, "path", nonempty=True))
    roots = {}
    for root, value in typed(ctx, table, where, "roots", dict, {}).items():
        key = f"{where}.roots.{root}"
        root_name(ctx, root, key)
        if root == PRIMARY_ROOT:
            raise ctx.fail(key, f"root '{PRIMARY_ROOT}' is the target's path", "Set it with "
                           "path, not under roots")
        if not isinstance(value, str) or not value:
            raise ctx.fail(key, f"root '{root}' must be a path string", "Quote the path")
        roots[root] = place(value)
    port = typed(ctx, table, where, "port", int, None)
    if port is not None and not 0 < port < 65536:
        raise ctx.fail(f"{where}.port", f"port {port} is out of range", "Use 1-65535")
    return TargetConfig(
        name=name, path=path, host=host,
        user=string(ctx, table, where, "user", None), port=port,
        python=string(ctx, table, where, "python", None),
        ssh_options=_ssh_settings(ctx, table, where),
        ssh_program=string(ctx, table, where, "ssh_program", None, nonempty=True), roots=roots)


def _ssh_settings(ctx: Any, table: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """``ssh_options``: ssh_config settings in the one form ``--ssh-option`` takes, each passed
    as ``ssh -o KEY=VALUE``; a raw ssh argument (``-o``, ``-i``) is refused, with the setting."""
    settings = strings(ctx, table, where, "ssh_options", ())
    for entry in settings:
        if not SSH_SETTING.fullmatch(entry):
            raise ctx.fail(f"{where}.ssh_options", f"{entry!r} is not an ssh_config setting "
                           "KEY=VALUE (ssh_options takes the form --ssh-option takes, each "
                           "passed as `ssh -o KEY=VALUE`)", 'Write e.g. ssh_options = '
                           '["ProxyJump=bastion", "IdentityFile=~/.ssh/deploy"] (for -i KEY: '
                           'IdentityFile=KEY; for -o X=Y: X=Y)')
    return settings


__all__ = ["load_config"]

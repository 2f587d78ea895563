"""A manifest's ``[[preconditions]]`` and ``[[verification]]`` (docs/manifest.md, "Checks"):
validated against the contract's check table, raising :class:`ManifestError` naming the key."""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..engine.contract import CHECK_KEYS, CHECK_KINDS, CHECK_TIMEOUTS, is_timeout
from .model import NAME_RE, SHA256_RE, Check
from .reader import (Ctx, check_keys, close_matches, rel_path, root_name, string, strings,
                     table_list, toml_type, typed)


def build_checks(ctx: Ctx, data: Mapping[str, Any], key: str,
                 default_root: str) -> tuple[Check, ...]:
    """The checks of the array of tables ``key``; a path's root defaults to ``default_root``."""
    out: list[Check] = []
    for i, table in enumerate(table_list(ctx, data, key), 1):
        where = f"{key}[{i}]"
        kind = string(ctx, table, where, "kind")
        if kind not in CHECK_KEYS:
            close = close_matches(kind, CHECK_KINDS, n=1, cutoff=0.5)
            hint = f"Did you mean '{close[0]}'? " if close else ""
            raise ctx.fail(f"{where}.kind", f"unknown check kind '{kind}'",
                           f"{hint}Kinds: {', '.join(CHECK_KINDS)}")
        required, optional = CHECK_KEYS[kind]
        check_keys(ctx, table, where, ("kind", "name", "timeout", *required, *optional), required)
        out.append(Check(kind, _check_params(ctx, table, where, kind, default_root)))
    return tuple(out)


def _check_params(ctx: Ctx, table: Mapping[str, Any], where: str, kind: str,
                  default_root: str) -> dict[str, Any]:
    """The keys every kind shares (name, timeout, root, path), then the kind's own."""
    params: dict[str, Any] = {}
    if "name" in table:
        params["name"] = string(ctx, table, where, "name")
    if "timeout" in table:
        timeout = table["timeout"]
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ctx.fail(f"{where}.timeout", f"timeout must be a number of seconds, not "
                           f"{toml_type(timeout)}", "Write it as a number, e.g. timeout = 600")
        if not is_timeout(timeout):
            raise ctx.fail(f"{where}.timeout", f"timeout {timeout} is not above 0 seconds",
                           f"Give the seconds the check may run (default {CHECK_TIMEOUTS[kind]:g})")
        params["timeout"] = timeout
    params["root"] = root_name(ctx, string(ctx, table, where, "root", default_root),
                               f"{where}.root")
    if "path" in CHECK_KEYS[kind][0]:
        params["path"] = rel_path(ctx, string(ctx, table, where, "path"), f"{where}.path")
    if kind == "grep":
        params.update(_grep(ctx, table, where))
    elif kind == "sha256":
        digest = string(ctx, table, where, "sha256")
        if not SHA256_RE.match(digest):
            raise ctx.fail(f"{where}.sha256", "sha256 is not 64 lowercase hex digits",
                           "Paste the output of sha256sum")
        params["sha256"] = digest
    elif kind == "python-import":
        params["module"] = string(ctx, table, where, "module", nonempty=True)
        if "sys_path" in table:
            params["sys_path"] = string(ctx, table, where, "sys_path")
    elif kind == "python-script":
        params["script"] = rel_path(ctx, string(ctx, table, where, "script"), f"{where}.script")
        params["args"] = _arguments(ctx, table, where, "args", [])
    elif kind == "command":
        argv = _arguments(ctx, table, where, "argv")
        if not argv:
            raise ctx.fail(f"{where}.argv", "argv is empty", "Give the program and arguments")
        params["argv"] = argv
        params["expect_exit"] = typed(ctx, table, where, "expect_exit", int, 0)
        if not 0 <= params["expect_exit"] <= 255:  # what a process can exit with
            raise ctx.fail(f"{where}.expect_exit", f"expect_exit {params['expect_exit']} is not "
                           "an exit code a command can give", "Use 0 to 255")
    elif kind in ("git-contains", "git-descends-from"):
        params.update(_git(ctx, table, where, kind))
    return params


def _arguments(ctx: Ctx, table: Mapping[str, Any], where: str, key: str,
               default: Any = None) -> list[str]:
    """``argv``/``args``; an argument that is a misspelt placeholder as a whole (``{pyth0n}``,
    ``{Python}``, ``{root}``) is refused: it would reach the command as written and fail there,
    or not. Other words in braces (a ``jq`` program's ``{a}``) are the command's own."""
    values = list(strings(ctx, table, where, key, default) if default is not None
                  else strings(ctx, table, where, key))
    for value in values:
        if not (value.startswith("{") and value.endswith("}")) or value == "{python}" or (
                value.startswith("{root:") and len(value) > len("{root:}")):
            continue
        import difflib  # here: only an argument in braces is looked at

        if difflib.get_close_matches(value[1:-1].split(":")[0].lower(), ("python", "root"),
                                     cutoff=0.6):
            raise ctx.fail(f"{where}.{key}", f"{value} is not a placeholder patchkit knows",
                           "Use {python} (the target's interpreter) or {root:NAME} (that "
                           "root's path), spelt exactly")
    return values


def _grep(ctx: Ctx, table: Mapping[str, Any], where: str) -> dict[str, Any]:
    params: dict[str, Any] = {"pattern": string(ctx, table, where, "pattern", nonempty=True)}
    if "\n" in params["pattern"]:
        raise ctx.fail(f"{where}.pattern", "pattern holds a newline, but grep matches one "
                       "line at a time", "Match a single line (use count for several)")
    params["regex"] = typed(ctx, table, where, "regex", bool, False)
    if params["regex"]:
        try:
            re.compile(params["pattern"])
        except re.error as exc:
            raise ctx.fail(f"{where}.pattern", f"pattern is not a valid regular "
                           f"expression: {exc}", "Fix it, or set regex = false") from None
    if "count" in table and "present" in table:
        raise ctx.fail(f"{where}.count", "a grep check needs exactly one of 'count' and "
                       "'present', and this one has both", "Keep count (exact number of "
                       "matching lines) or present (true/false), not both")
    if "count" not in table and "present" not in table:
        raise ctx.fail(f"{where}.count", "a grep check needs one of 'count' and 'present', "
                       "and this one has neither", "Add count = N (the exact number of "
                       "matching lines) or present = true/false")
    if "count" in table:
        params["count"] = typed(ctx, table, where, "count", int)
        if params["count"] < 0:
            raise ctx.fail(f"{where}.count", "count is negative", "Use 0 or more")
    else:
        params["present"] = typed(ctx, table, where, "present", bool)
    return params


def _git(ctx: Ctx, table: Mapping[str, Any], where: str, kind: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    pair = ("commit", "fix") if kind == "git-contains" else ("tag", "commit")
    if (pair[0] in table) == (pair[1] in table):
        raise ctx.fail(f"{where}.{pair[0]}", f"a {kind} check needs exactly one of "
                       f"'{pair[0]}' and '{pair[1]}'", f"Keep one of {pair[0]} and {pair[1]}")
    for key in pair:
        if key in table:
            params[key] = string(ctx, table, where, key, nonempty=True)
    if "fix" in params and not NAME_RE.match(params["fix"]):
        raise ctx.fail(f"{where}.fix", f"'{params['fix']}' is not a fix name", "Name a "
                       "fix of the catalog")
    if kind == "git-contains":
        params["present"] = typed(ctx, table, where, "present", bool, True)
    return params

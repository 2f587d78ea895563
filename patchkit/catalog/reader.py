"""Reading the catalog's TOML files and checking their values: ``tomllib`` parses, tomlkit
names the line and column of what it refuses; errors name the file, the key and what to do."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import ManifestError

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    tomllib = None  # type: ignore[assignment]

ROOT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
MISSING: Any = object()
_TOML_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
               (list, "an array"), (dict, "a table"), (_dt.datetime, "a date-time"), (_dt.date, "a date"))
DOCS = "docs/manifest.md"


class Ctx:
    """Which file is being read, so every error names it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, message: str, todo: str) -> ManifestError:
        """The error at ``key``, named ``FILE:LINE`` as ``list`` shows it (the key's line)."""
        named = "." not in key and f"'{key}'" in message  # the message says it already
        where = f" (key '{key}')" if key and not named else ""
        line = key_line(self.path, key) if key else None
        at = f"{self.path}:{line}" if line else f"{self.path}"
        return ManifestError(f"{at}: {message}{where}. {todo}", file=str(self.path), key=key,
                             line=line)


def key_line(path: Path, key: str, value: str | None = None) -> int | None:
    """The line of ``key`` in a TOML file: ``variants[2].releases`` is the ``releases`` line of
    the second ``[[variants]]`` table (that table's header when the key is not written there),
    ``upstream.releases`` the one in ``[upstream]``; with ``value``, the first line that sets it
    to that string (``root = "serve"``). A key found in no table it names: its first line
    anywhere."""
    *tables, last = key.split(".")
    last = re.sub(r"\[\d+\]$", "", last)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    said = "" if value is None else rf"\s*[\"']{re.escape(value)}[\"']"
    pattern = re.compile(rf"\s*[\"']?{re.escape(last)}[\"']?\s*={said}")
    section = _table_lines(lines, tables)
    if section is not None:
        header, start, end = section
        found = next((i for i in range(start, end) if pattern.match(lines[i])), None)
        if found is not None or tables:
            return (header if found is None else found) + 1
    return next((i for i, text in enumerate(lines, 1) if pattern.match(text)), None)


_HEADER = re.compile(r"\s*\[\[?\s*([\w.-]+)\s*\]\]?\s*(?:#.*)?$")


def _table_lines(lines: list[str], tables: list[str]) -> tuple[int, int, int] | None:
    """Where the table named by ``tables`` (``["variants[2]", "patches[1]"]``) is: its header's
    index, and the range of its own key lines (up to the next header); the top level for none."""
    lo, hi, header, name = 0, len(lines), 0, ""
    for part in tables:
        m = re.fullmatch(r"(.+?)\[(\d+)\]", part)
        base, want = (m.group(1), int(m.group(2))) if m else (part, 1)
        name = f"{name}.{base}" if name else base
        seen, found = 0, None
        for i in range(lo, hi):
            h = _HEADER.match(lines[i])
            if h and h.group(1) == name:
                seen += 1
                if seen == want:
                    found = i
                    break
        if found is None:
            return None
        header, lo = found, found + 1
        hi = next((j for j in range(lo, hi) if (h := _HEADER.match(lines[j]))
                   and not h.group(1).startswith(name + ".")), hi)
    end = next((j for j in range(lo, hi) if _HEADER.match(lines[j])), hi)
    return header, lo, end


def key_where(path: Path, key: str, value: str | None = None) -> str:
    """``FILE:LINE`` of :func:`key_line` (``FILE`` when the line is not found)."""
    line = key_line(path, key, value)
    return f"{path}:{line}" if line else str(path)


def full_key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _table_label(where: str) -> str:
    match = re.fullmatch(r"(\w+)\[(\d+)\]", where)
    if match:
        return f"[[{match.group(1)}]] #{match.group(2)}"
    return f"[{where}]" if where else "the top level of the file"


def close_matches(word: str, choices: Sequence[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The names among ``choices`` that ``word`` is probably a misspelling of, for a refusal's
    "Did you mean" (difflib is loaded only when something is refused)."""
    import difflib

    return difflib.get_close_matches(word, choices, n=n, cutoff=cutoff)


def check_keys(ctx: Ctx, data: Mapping[str, Any], where: str, allowed: Sequence[str],
               required: Sequence[str]) -> None:
    for key in data:
        if key not in allowed:
            close = close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"Did you mean '{close[0]}'?" if close else "Remove it or fix its spelling."
            raise ctx.fail(full_key(where, key), f"unknown key '{key}' in {_table_label(where)}",
                           f"{hint} Valid keys there: "
                           f"{', '.join(sorted(allowed))} (see {DOCS})")
    for key in required:
        if key not in data:
            raise ctx.fail(full_key(where, key), f"missing required key '{key}' in "
                           f"{_table_label(where)}", f"Add it (see {DOCS})")


def typed(ctx: Ctx, data: Mapping[str, Any], where: str, key: str, kind: type,
          default: Any = MISSING) -> Any:
    if key not in data:
        if default is MISSING:
            raise ctx.fail(full_key(where, key), f"missing required key '{key}'",
                           f"Add it (see {DOCS})")
        return default
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ctx.fail(full_key(where, key), f"'{key}' must be {dict(_TOML_TYPES)[kind]}, "
                       f"not {toml_type(value)} ({value!r})", f"Fix its value (see {DOCS})")
    return value


def toml_type(value: Any) -> str:
    for kind, name in _TOML_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def string(ctx: Ctx, data: Mapping[str, Any], where: str, key: str, default: Any = MISSING,
           nonempty: bool = False) -> str:
    value = typed(ctx, data, where, key, str, default)
    if nonempty and value is not None and not value.strip():  # a default of None stays None
        raise ctx.fail(full_key(where, key), f"'{key}' is empty", "Give it a value")
    return value


def strings(ctx: Ctx, data: Mapping[str, Any], where: str, key: str,
            default: Any = MISSING) -> tuple[str, ...]:
    value = typed(ctx, data, where, key, list, default)
    for item in value:
        if not isinstance(item, str):
            raise ctx.fail(full_key(where, key), f"'{key}' must be an array of strings, but holds "
                           f"{toml_type(item)} ({item!r})", "Quote each item")
    return tuple(value)


def choice(ctx: Ctx, data: Mapping[str, Any], where: str, key: str, choices: Sequence[str],
           default: Any = MISSING) -> str:
    value = string(ctx, data, where, key, default)
    if value not in choices:
        close = close_matches(value, choices, n=1, cutoff=0.5)
        hint = f"Did you mean '{close[0]}'? " if close else ""
        raise ctx.fail(full_key(where, key), f"'{key}' is '{value}', not one of "
                       f"{', '.join(choices)}", f"{hint}Use one of those values")
    return value


def rel_path(ctx: Ctx, value: str, key: str) -> str:
    """A path relative to a root or the fix's patch dir: never absolute, never up and out."""
    if not value or value[0] == "/" or "\\" in value or ".." in value.split("/"):
        raise ctx.fail(key, f"path '{value}' must be relative, with '/' separators and no "
                       "'..'", "Give the path relative to its root")
    return value


def table_list(ctx: Ctx, data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ctx.fail(key, f"'{key}' must be an array of tables ([[{key}]])",
                       f"Write each entry as a [[{key}]] table")
    return value


def root_name(ctx: Ctx, root: str, key: str) -> str:
    if not ROOT_NAME_RE.match(root):
        raise ctx.fail(key, f"'{root}' is not a root name", "Use letters, digits, '_', '.', '-'")
    return root


def read_text(path: Path, kind: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such {kind} file", file=str(path), key="") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}). "
                            f"Save the {kind} as UTF-8", file=str(path), key="") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the {kind}: {exc.strerror}", file=str(path),
                            key="") from None


def read_data(path: Path, kind: str) -> dict[str, Any]:
    """The file's TOML as plain Python data (see the module docstring for the parser)."""
    return loads(path, read_text(path, kind))


def loads(path: Path, text: str) -> dict[str, Any]:
    """``text`` (the contents of ``path``) as plain Python data, or the precise error."""
    if tomllib is not None:
        try:
            return tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError):
            pass  # tomlkit names the line and column (or accepts what tomllib refuses)
        except RecursionError:  # tomllib recurses once per level of nesting
            raise _too_deep(path) from None
    return parse_toml(path, text).unwrap()


def _too_deep(path: Path) -> ManifestError:
    """Nesting deeper than the parser (or Python's recursion limit) goes."""
    return Ctx(path).fail("", "not valid TOML: values or keys nested too deeply to read",
                          "Flatten the nesting (a few levels of tables and arrays is "
                          "all the format uses; see docs/manifest.md)")


def read_toml(path: Path, kind: str) -> Any:
    """The file as a tomlkit document, for editing it in place."""
    return parse_toml(path, read_text(path, kind))


def parse_toml(path: Path, text: str) -> Any:
    import tomlkit
    import tomlkit.exceptions

    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.TOMLKitError as exc:
        reason = re.sub(r" at line \d+ col \d+$", "", str(exc)).rstrip(".")
        twice = _ALREADY.match(reason)
        if twice:  # tomlkit's position is past the item (a ParseError), or none (inline)
            line, col, first = _second_key(text, twice.group(1))
            where = f" (first at line {first})" if first else ""
            raise ManifestError(
                f"{path}:{line}: not valid TOML: {reason}: it is given a second time here{where} "
                "(a key, or a [table], is given once in its table). Remove one of the two, or "
                "rename it", file=str(path), line=line, col=col, first_line=first) from None
        if not isinstance(exc, tomlkit.exceptions.ParseError):
            raise Ctx(path).fail("", f"not valid TOML: {reason}",
                                 "Fix the syntax (https://toml.io)") from None
        line, col = exc.line, exc.col + 1  # tomlkit counts columns from 0, editors from 1
        if reason == "Redefinition of an existing table":  # its position: the table's end
            line, col, table, first = _redefined_table(text, reason)
            if first is not None:  # the key that made it first is what to move
                key = text.splitlines()[first - 1].split("=", 1)[0].strip()
                raise ManifestError(
                    f"{path}:{first}: not valid TOML: the key `{key}` here makes the table "
                    f"[{table}], and the [{table}] header at line {line} makes it again. Move "
                    f"the key under that header (without its `{table}.`)", file=str(path),
                    line=first, col=1) from None
            raise ManifestError(
                f"{path}:{line}: not valid TOML: this [{table}] header defines a table the "
                "lines above made already. Put its keys under one header", file=str(path),
                line=line, col=col) from None
        if reason.startswith("Unexpected end of file") or ("'\\x00'" in reason
                                                           and "\x00" not in text):
            # tomlkit's end-of-input sentinel: an array, inline table, string or [table]
            # header is still open where the file stops (where tomlkit says it is)
            begun = _open_item_line(text.splitlines(keepends=True))
            line, col = (begun, 1) if begun else (line, col)
            raise ManifestError(
                f"{path}:{line}: not valid TOML: the file ends inside a value (an array, "
                f"inline table, string or [table] header {f'begun at line {begun} ' if begun else ''}"
                "is not closed). Close it (']', '}' or the quote) or finish the value (TOML "
                "reference: https://toml.io)", file=str(path), line=line, col=col) from None
        unclosed = _unclosed_multiline(text, line)
        if unclosed is not None:  # what follows it was read as its text, up to the next quotes
            begun, quotes = unclosed
            raise ManifestError(
                f"{path}:{begun}: not valid TOML: the multi-line string begun here is not closed: "
                f"the lines after it, up to the next {quotes}, were read as its text, and what "
                f"followed failed at line {line} ({reason}). Close it with {quotes}",
                file=str(path), line=begun, col=1) from None
        if "\\u000a" in reason:  # tomlkit: "Control characters ... use \u000a instead"
            raise ManifestError(
                f"{path}:{line}: not valid TOML: a string is not closed on its line (a \"...\" "
                "string ends on the line it starts). Close the quote, or write a string of "
                "several lines between triple quotes (\"\"\"...\"\"\")", file=str(path), line=line,
                col=col) from None
        raise ManifestError(f"{path}:{line}:{col}: not valid TOML: {reason}. Fix the syntax at "
                            f"line {line} column {col} (TOML reference: https://toml.io)",
                            file=str(path), line=line, col=col) from None
    except RecursionError:  # a tomlkit without its own nesting limit
        raise _too_deep(path) from None


_ALREADY = re.compile(r'Key "(.*)" already exists\Z')


def _second_key(text: str, key: str) -> tuple[int, int, int | None]:
    """Where ``key`` is given the second time (line and column, from 1). tomlkit says where it
    stopped, past that item: the next line, or the end of a whole [table]. The item ends on the
    first line whose prefix of the file tomlkit refuses the same way; it starts on the last line
    at or above that one naming the key where the lines above parse on their own (not inside
    a multi-line value)."""
    lines = text.splitlines(keepends=True)
    hi = _first_refused(lines, lambda reason: bool((m := _ALREADY.match(reason))
                                                   and m.group(1) == key))
    k = re.escape(key)
    setting = re.compile(rf"""(?:^|[{{,])\s*(?:[^=\[\]{{}},#"']*\.\s*)?(["']?){k}\1\s*=""")
    header = re.compile(rf"""^\s*\[\[?\s*(?:[^\]#]*\.\s*)?(["']?){k}\1\s*\]""")
    for n in range(hi, 0, -1):
        found = [*setting.finditer(lines[n - 1]), *header.finditer(lines[n - 1])]
        if found and _parses(lines[:n - 1]):
            # the last: {a = 1, a = 2} gives it twice in a line
            return n, found[-1].start(1) + 1, _first_given(lines, n, setting, header)
    return hi, 1, None


def _first_given(lines: list[str], second: int, setting: re.Pattern[str],
                 header: re.Pattern[str]) -> int | None:
    """The line that gave the key first: in the table the second one is in (from the nearest
    [table] header above it), else anywhere above (a header for a table a key made), where the
    lines above parse on their own. None when only the second's line has it."""
    start = next((m for m in range(second - 1, 0, -1) if lines[m - 1].lstrip().startswith("[")), 1)
    for lo in (start, 1):
        for m in range(lo, second):
            if (setting.search(lines[m - 1]) or header.search(lines[m - 1])) and _parses(lines[:m - 1]):
                return m
    return None


def _unclosed_multiline(text: str, failed: int) -> tuple[int, str] | None:
    """The line (above ``failed``) where a multi-line string that is never closed begins, and
    its quotes: the file holds an odd number of them, and it is the last line opening one
    (an odd number on it) where the lines above parse on their own."""
    lines = text.splitlines(keepends=True)
    for quotes in ('"""', "'''"):
        if text.count(quotes) % 2 == 0:
            continue
        opening = [n for n in range(min(failed, len(lines)), 0, -1)
                   if lines[n - 1].count(quotes) % 2 == 1]
        begun = next((n for n in opening[:_LOOKED_AT] if _parses(lines[:n - 1])), None)
        if begun is not None and begun < failed:
            return begun, quotes
    return None


_ITEM_START = re.compile(r"""\s*(?:\[|[\w"'.-][^=]*=)""")  # a [table] header or a key = line
_LOOKED_AT = 200  # lines that may start the open item, at most: each costs a parse


def _open_item_line(lines: list[str]) -> int | None:
    """The line where the item the file ends inside begins: the last line that may start one
    (a key = or a [table] header) where the lines above parse on their own."""
    starts = [n for n in range(len(lines), 0, -1) if _ITEM_START.match(lines[n - 1])]
    return next((n for n in starts[:_LOOKED_AT] if _parses(lines[:n - 1])), None)


def _first_refused(lines: list[str], same: Callable[[str], bool]) -> int:
    """The fewest of ``lines`` (all of them are) that tomlkit refuses for a reason ``same``
    accepts: where the item it refuses ends, whatever position it says."""
    lo, hi = 1, len(lines)
    while lo < hi:
        mid = (lo + hi) // 2
        if _refused_why(lines[:mid], same):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _refused_why(lines: list[str], same: Callable[[str], bool]) -> bool:
    import tomlkit
    import tomlkit.exceptions

    try:
        tomlkit.parse("".join(lines))
    except tomlkit.exceptions.TOMLKitError as exc:
        return same(re.sub(r" at line \d+ col \d+$", "", str(exc)).rstrip("."))
    return False


def _redefined_table(text: str, reason: str) -> tuple[int, int, str, int | None]:
    """Where a [table] header redefines a table a dotted key (or an inline table, or an
    earlier header) made: its line and column, its name, and the line of the key that made
    the table first, if one did. tomlkit says where the table ends; its header is the last at
    or above the first line tomlkit refuses so, where the lines above parse on their own."""
    lines = text.splitlines(keepends=True)
    hi = _first_refused(lines, lambda said: said == reason)
    for n in range(hi, 0, -1):
        if lines[n - 1].lstrip().startswith("[") and _parses(lines[:n - 1]):
            name = _dotted(lines[n - 1].strip().strip("[]"))
            return n, len(lines[n - 1]) - len(lines[n - 1].lstrip()) + 1, name, \
                _made_by_key(lines[:n - 1], name)
    return hi, 1, "", None


def _dotted(key: str) -> str:
    return ".".join(part.strip() for part in key.split("."))


def _made_by_key(lines: list[str], table: str) -> int | None:
    """The first of ``lines`` whose key (under the [table] header above it, if any) is
    ``table`` itself (an inline table) or a dotted key in it: the key that made the table."""
    inside = ""
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("["):
            inside = _dotted(text.strip("[]"))
            continue
        key = text.split("=", 1)[0] if "=" in text and not text.startswith("#") else ""
        full = _dotted(f"{inside}.{key}" if inside else key) if key.strip() else ""
        if full and (full == table or full.startswith(table + ".")) and _parses(lines[:n - 1]):
            return n
    return None


def _parses(lines: list[str]) -> bool:
    import tomlkit
    import tomlkit.exceptions

    try:
        tomlkit.parse("".join(lines))
    except tomlkit.exceptions.TOMLKitError:
        return False
    return True

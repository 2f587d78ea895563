"""Edits of a manifest in place keeping the author's comments and layout (tomlkit), validated
before the file is replaced; and the text of a new manifest."""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import tomlkit
from tomlkit.items import AoT, Table

from .manifest import build_fix
from .model import MANIFEST_FORMAT, PLACEHOLDER, RELEASE_RE, Fix
from .reader import Ctx, loads, read_toml


#: How the rationale of a manifest `patchkit new` wrote starts until its author replaces it.
#: The base_release of a fix that patches no SGLang root, when nothing names one.
NO_RELEASE = "any"


def _patch_entry(entry: Sequence[str]) -> dict[str, str]:
    """The ``[[patches]]`` keys of ``(file, root)`` or ``(file, root, description)``."""
    file, root, *rest = entry
    return {"file": file, "root": root, **({"description": rest[0]} if rest and rest[0] else {})}


#: A new manifest, line by line: a key's trailing comment follows two spaces; ``_rows`` splits it
#: off before the values go in, and ``aligned`` puts each block's comments in one column.
_SKELETON = """\
# Manifest of the fix {name_raw}; the format is described in docs/manifest.md.
format = {format}
name = {name}
version = {version}  # bump on every change of the series (see [[changelog]])
title = {title}
status = "active"  # active | dead | superseded | upstreamed
rationale = {rationale}
depends_on = {depends_on}  # fixes that must be applied first

[upstream]
project = {project}
base_release = {base}  # the release the series was written against
releases = {releases}  # releases it is known to apply to ([] = no release check)
root = {root}  # {root_note}
forwarding = "not-forwarded"  # not-forwarded | proposed | merged | rejected | not-applicable
reference = ""  # upstream PR / issue / commit

# The series, applied in this order; each file is under patches/{name_raw}/.
{patches}
# Checks, optional; every kind is described in docs/manifest.md. For example:
# [[preconditions]]
# kind = "grep"
# path = "python/sglang/srt/..."
# pattern = "a line the series expects to find"
# count = 1
# (a pattern is a plain substring of a line; regex = true makes it a regular expression)
#
# [[verification]]
# kind = "python-syntax"
# path = "python/sglang/srt/..."

[[changelog]]  # one entry per version, oldest first
version = {version}
date = {date}
base_release = {base}
summary = {summary}
"""

#: One line of a generated file: its code and its trailing comment ("" for none). The code of
#: one row may span lines (a multi-line string, the [[patches]] tables); none has a comment then.
Row = tuple[str, str]


def _rows(template: str, values: dict[str, Any]) -> list[Row]:
    """The template's lines with ``values`` in, each trailing comment kept apart from its code
    (split off before the values go in, so a value holding ``  # `` is never taken for one)."""
    rows = []
    for line in template.splitlines():
        code, _, comment = line.partition("  # ")
        rows.append((code.format(**values), comment.format(**values)))
    return rows


def aligned(rows: Sequence[Row]) -> str:
    """``rows`` as text, the trailing comments of each block (the rows between two blank ones)
    in one column, two spaces past the longest line of that block that carries one."""
    out: list[str] = []
    block: list[Row] = []

    def flush() -> None:
        width = max((len(code) for code, comment in block if comment), default=0)
        out.extend(f"{code.ljust(width)}  # {comment}" if comment else code
                   for code, comment in block)
        block.clear()

    for code, comment in rows:
        if code or comment:
            block.append((code, comment))
        else:
            flush()
            out.append("")
    flush()
    return "\n".join(out) + "\n"


def new_manifest_text(name: str, title: str, base_release: str,
                      patches: list[tuple[str, str]], rationale: str = "", *,
                      date: str | None = None, author: str = "",
                      upstream: dict[str, str] | None = None,
                      headers: Sequence[tuple[str, str]] = (),
                      release_root: str | None = "sglang", version: int = 1,
                      summary: str = "First version.",
                      depends_on: Sequence[str] = ()) -> str:
    """A commented manifest that loads as-is (once its patch files exist), validated here: at
    ``version`` (1 unless an import continues a fix's lineage), its one changelog entry saying
    ``summary``; ``patches`` are ``(file, root)`` or ``(file, root, description)``. ``author``,
    ``upstream`` (forwarding, reference, bug, origin, applied), ``headers`` (in order, a
    repeated one becoming a list) and ``depends_on`` are what an imported patch said
    (docs/interop.md). ``release_root``: the root whose release is checked; None: the series
    patches no SGLang root, so no release is checked (``releases = []``) and the project and
    root are the first patch's root."""
    def q(value: Any) -> str:
        return tomlkit.item(value).as_string()

    why = rationale.strip() or (f"{PLACEHOLDER} what was wrong, what the fix does, and the\n"
                                "evidence (logs, measurements, upstream discussion).")
    blocks = ["[[patches]]\n" + "".join(f"{key} = {q(value)}\n" for key, value in _patch_entry(e).items())
              for e in patches]
    first_root = _patch_entry(patches[0])["root"]
    rows = _rows(_SKELETON, dict(
        format=MANIFEST_FORMAT, name=q(name), name_raw=name, title=q(title),
        rationale=tomlkit.string(why + "\n", multiline=True).as_string(), base=q(base_release),
        patches="\n".join(blocks), date=q(date or _dt.date.today().isoformat()),
        version=version, summary=q(summary), depends_on=q(list(depends_on)),
        project=q("sglang" if release_root is not None else first_root),
        releases=q([base_release] if release_root is not None else []),
        root=q(release_root if release_root is not None else first_root),
        root_note=("the root whose release is checked" if release_root is not None
                   else "no release is checked (releases = [])")))
    if author or any((upstream or {}).values()) or headers:
        rows = _with_fields(rows, author, upstream or {}, headers)
    text = aligned(rows)
    path = Path(f"{name}.toml")
    build_fix(Ctx(path), loads(path, text), Path("patches") / name)
    return text


def _with_fields(rows: list[Row], author: str, upstream: dict[str, str],
                 headers: Sequence[tuple[str, str]]) -> list[Row]:
    """The skeleton's rows with the fields an import brings, each on its own line."""
    def q(value: Any) -> str:
        return tomlkit.item(value).as_string()

    def at(key: str) -> int:
        return next(i for i, (code, _) in enumerate(rows) if code.startswith(f"{key} = "))

    rows = list(rows)
    if author:
        rows.insert(at("depends_on"), (f"author = {q(author)}", ""))
    for key in ("forwarding", "reference"):
        if upstream.get(key):
            rows[at(key)] = (f"{key} = {q(upstream[key])}", rows[at(key)][1])
    rows[at("reference") + 1:at("reference") + 1] = [
        (f"{key} = {q(upstream[key])}", "") for key in ("bug", "origin", "applied")
        if upstream.get(key)]
    if RELEASE_RE.match(upstream.get("applied") or ""):  # upstream since that release, as
        rows[at("status")] = ('status = "upstreamed"', rows[at("status")][1])  # --mark writes it
    grouped: dict[str, list[str]] = {}
    for key, value in headers:
        grouped.setdefault(key, []).append(value)
    if grouped:
        rows += [("", ""), ("# Other patch headers, kept as they came (docs/interop.md).", ""),
                 ("[headers]", "")]
        rows += [(f"{key} = {q(values[0] if len(values) == 1 else values)}", "")
                 for key, values in grouped.items()]
    return rows


def bump_manifest(path: Path | str, *, version: int, changelog_summary: str, date: str,
                  patches: Sequence[tuple[str, str] | tuple[str, str, str]] | None = None,
                  base_release: str | None = None,
                  releases: list[str] | None = None, status: str | None = None,
                  applied: str | None = None, keep_as: str | None = None,
                  drop_variants: bool = False) -> None:
    """Record a new version of the series in place, with a changelog entry for ``version``;
    ``base_release`` without ``releases`` also resets an explicit ``releases`` to it;
    ``status`` and ``applied`` (``[upstream] applied``) are set when given. ``keep_as`` (a
    folder under ``patches/<fix>/`` already holding the current series' copy) keeps the
    current version as a ``[[variants]]`` entry for its releases the new one does not serve;
    ``drop_variants`` removes every variant (their folders are the caller's to delete)."""
    path = Path(path)
    ctx, doc, current = _open(path)
    _check_next(ctx, current, version)
    new_releases = releases if releases is not None else (
        [base_release] if base_release is not None and "releases" in doc["upstream"] else None)
    if drop_variants and "variants" in doc:
        del doc["variants"]
    elif new_releases is not None:
        _rework_variants(doc, current, new_releases, keep_as)
    _set(doc, "version", version)
    if status is not None:
        doc["status"] = status
    if applied is not None:
        doc = _set_in_table(doc, "upstream", "applied", applied)
    upstream = doc["upstream"]
    if base_release is not None:
        _set(upstream, "base_release", base_release)
        if releases is None and "releases" in upstream:
            releases = [base_release]
    if releases is not None:
        _set(upstream, "releases", releases)
    if patches is not None:
        doc["patches"] = [_patch_entry(e) for e in patches]  # tomlkit makes it [[patches]]
    _add_changelog(doc, version, date, base_release or current.upstream.base_release,
                   changelog_summary)
    _save(ctx, doc, current)


def bump_variant(path: Path | str, variant_dir: str, *, version: int, changelog_summary: str,
                 date: str, patches: Sequence[tuple[str, str] | tuple[str, str, str]] | None = None,
                 split: tuple[str, str] | None = None) -> None:
    """Record a new version of the ``[[variants]]`` series kept in ``patches/<fix>/<variant_dir>``
    (a bug fixed in an older release's series): the variant's ``version``, its patches when
    given, and a changelog entry; the top level is left as it is. ``split`` (release, folder):
    the new series serves (and is based on) that release alone, and the old version stays a
    variant of its own for its other releases, its series in the folder (where the caller has
    copied it)."""
    path = Path(path)
    ctx, doc, current = _open(path)
    _check_next(ctx, current, version)
    index = next(i for i, v in enumerate(current.variants) if v.dir == variant_dir)
    old = current.variants[index]
    table = doc["variants"][index]
    base = old.base_release
    if split is not None:
        base, keep_as = split
        kept = tomlkit.table()
        kept.update(dict(table.unwrap(), releases=[r for r in old.releases if r != base],
                         dir=keep_as))
        doc["variants"].append(kept)
        _set(table, "base_release", base)
        _set(table, "releases", [base])
        if "dir" not in table:  # the folder was named by the old base release: keep it
            _set(table, "dir", old.dir)
    _set(table, "version", version)
    if patches is not None:
        table["patches"] = [_patch_entry(e) for e in patches]
    _add_changelog(doc, version, date, base, changelog_summary)
    _save(ctx, doc, current)


def add_variant(path: Path | str, *, version: int, base_release: str, variant_dir: str,
                patches: Sequence[tuple[str, str] | tuple[str, str, str]], changelog_summary: str,
                date: str, checks_from: str | None = None) -> None:
    """A new ``[[variants]]`` entry, the fix's series for ``base_release`` alone (a backport
    onto an older release: docs/rebase.md, "Backports"), in ``patches/<fix>/<variant_dir>/``,
    with a changelog entry; the top level and the other variants are left as they are.
    ``checks_from``: the folder of the variant it was made from, whose own preconditions and
    verification it keeps (else it has the top level's, as the series it came from had)."""
    path = Path(path)
    ctx, doc, current = _open(path)
    _check_next(ctx, current, version)
    entry: dict[str, Any] = {"version": version, "base_release": base_release,
                             "releases": [base_release], "dir": variant_dir,
                             "patches": [_patch_entry(e) for e in patches]}
    if checks_from is not None:
        index = next(i for i, v in enumerate(current.variants) if v.dir == checks_from)
        raw = doc["variants"][index].unwrap()
        entry.update((key, raw[key]) for key in ("preconditions", "verification") if key in raw)
    table = tomlkit.table()
    table.update(entry)
    if "variants" in doc:
        doc["variants"].append(table)
    else:
        aot = tomlkit.aot()
        aot.append(table)
        doc.add("variants", aot)
    _add_changelog(doc, version, date, base_release, changelog_summary)
    _save(ctx, doc, current)


def add_variant_release(path: Path | str, variant_dir: str, release: str) -> bool:
    """Add ``release`` to the releases of the variant in ``patches/<fix>/<variant_dir>/``, its
    version unchanged (its series applies there as it is); False when it was listed already."""
    path = Path(path)
    ctx, doc, current = _open(path)
    index = next(i for i, v in enumerate(current.variants) if v.dir == variant_dir)
    variant = current.variants[index]
    if release in variant.releases:
        return False
    _set(doc["variants"][index], "releases", [*variant.releases, release])
    _save(ctx, doc, current)
    return True


def _check_next(ctx: Ctx, current: Fix, version: int) -> None:
    """A new version is above every version the fix has (its top level's and its variants')."""
    if version < current.next_version:
        raise ctx.fail("version", f"new version {version} is not above the fix's versions "
                       f"(v{current.next_version - 1} the newest)", f"Use version {current.next_version}")


def _set(table: Any, key: str, value: Any) -> None:
    """``table[key] = value``, its trailing comment kept in the column it was in (tomlkit keeps
    the spaces before it, so a longer value pushed the comment out of line with the others)."""
    old = table.item(key) if key in table else None
    table[key] = value
    if old is not None and old.trivia.comment:
        column = len(old.as_string()) + len(old.trivia.comment_ws)
        table.item(key).trivia.comment_ws = " " * max(1, column - len(table.item(key).as_string()))


def _add_changelog(doc: Any, version: int, date: str, base_release: str, summary: str) -> None:
    """Append the ``[[changelog]]`` entry of ``version``."""
    entry = tomlkit.table()
    entry.update({"version": version, "date": date, "base_release": base_release,
                  "summary": summary})
    if "changelog" not in doc:
        doc.add("changelog", tomlkit.aot())
    doc["changelog"].append(entry)


def variant_dir(fix: Fix, base_release: str) -> str:
    """The folder a variant for ``base_release`` gets: the release, else ``v<version>``."""
    taken = {v.dir for v in fix.variants}
    return base_release if base_release not in taken else f"v{fix.version}"


def _rework_variants(doc: Any, current: Fix, serves: list[str], keep_as: str | None) -> None:
    """The variants once the top level serves ``serves``: those releases leave every variant
    (a variant left with none is removed); ``keep_as`` adds the current top level as one."""
    raw = doc.unwrap()
    kept = []
    for table, variant in zip(raw.get("variants", []), current.variants):
        left = [r for r in variant.releases if r not in serves]
        if left:
            kept.append(dict(table, releases=left) if left != list(variant.releases) else table)
    old_left = [r for r in current.upstream.releases if r not in serves]
    if keep_as is not None and old_left:
        entry: dict[str, Any] = {
            "version": current.version, "base_release": current.upstream.base_release,
            "releases": old_left, "dir": keep_as,
            "patches": [_patch_entry((p.file, p.root, p.description)) for p in current.patches]}
        for key in ("preconditions", "verification"):
            if raw.get(key):
                entry[key] = raw[key]
        kept.insert(0, entry)
    if "variants" in doc:
        del doc["variants"]
    if kept:
        aot = tomlkit.aot()
        for entry in kept:
            table = tomlkit.table()
            table.update(entry)
            aot.append(table)
        doc.add("variants", aot)


def set_upstream(path: Path | str, release: str) -> bool:
    """Mark the fix upstream since ``release`` (``status = "upstreamed"``, ``[upstream]
    applied``), its version and series unchanged: hosts on earlier releases keep the version
    they run; False when it was marked so already (nothing written)."""
    ctx, doc, current = _open(Path(path))
    if current.status == "upstreamed" and current.upstream.applied == release:
        return False
    doc["status"] = "upstreamed"
    doc = _set_in_table(doc, "upstream", "applied", release)
    _save(ctx, doc, current)
    return True


def _set_in_table(doc: Any, name: str, key: str, value: Any) -> Any:
    """``doc`` with ``key`` set in its table ``name``: a new key goes after the table's last
    key, not after the comments and blank lines that end the table (they introduce the next
    one), where tomlkit's public API would append it. tomlkit has no public insert, so the
    rendered document gets the line there and is parsed again (the document returned)."""
    table = doc[name]
    body = table.value.body
    keyed = [i for i, (k, _item) in enumerate(body) if k is not None]
    if key in table or not keyed or keyed[-1] == len(body) - 1:
        table[key] = value
        return doc
    head = "[%s]%s%s%s" % (name, table.trivia.comment_ws, table.trivia.comment, table.trivia.trail)
    text, rendered = tomlkit.dumps(doc), head + table.as_string()
    tail = "".join(item.as_string() for _k, item in body[keyed[-1] + 1:])
    if not rendered.endswith(tail) or text.count(rendered) != 1:
        table[key] = value  # the table's place is not certain: appended, as tomlkit does
        return doc
    at = text.index(rendered) + len(rendered) - len(tail)
    return tomlkit.parse(text[:at] + tomlkit.dumps({key: value}) + text[at:])


def add_release(path: Path | str, release: str) -> bool:
    """Add ``release`` to ``upstream.releases`` in place, the version unchanged; False when
    the release was listed already (nothing written)."""
    ctx, doc, current = _open(Path(path))
    if release in current.upstream.releases or not current.upstream.releases:
        return False
    doc["upstream"]["releases"] = [*current.upstream.releases, release]
    if current.variants:  # the release leaves the variant that served it
        _rework_variants(doc, current, [*current.upstream.releases, release], None)
    _save(ctx, doc, current)
    return True


def _open(path: Path) -> tuple[Ctx, Any, Fix]:
    """The manifest as a tomlkit document and as the fix it validates to."""
    ctx, doc = Ctx(path), read_toml(path, "manifest")
    return ctx, doc, build_fix(ctx, doc.unwrap(), path.parent.parent / "patches" / path.stem)


def _spaced(container: Any) -> None:
    """A blank line between each table of ``container`` (and of the tables in it) and the
    table header that follows, as in a hand-written manifest: tomlkit writes a table appended
    to an array of tables read from the file, or put in place of one, right under the line
    above. Comments right above a header (they introduce it) stay there, under the blank."""
    order = []
    for _key, item in container.body:
        tables = list(item) if isinstance(item, AoT) else [item] if isinstance(item, Table) else []
        order += [(True, t) for t in tables] or [(False, item)]
    for i, (is_table, table) in enumerate(order):
        if not is_table:
            continue
        _spaced(table.value)
        gap = ""
        for later_is_table, later in order[i + 1:]:
            if later_is_table:
                if not _ends_in_break(table.as_string() + gap + later.trivia.indent):
                    table.add(tomlkit.nl())
                break
            gap += later.as_string()


def _ends_in_break(text: str) -> bool:
    """``text`` ends with a blank line, or with comment lines under one."""
    lines = text.split("\n")[:-1]
    while lines and lines[-1].lstrip().startswith("#"):
        lines.pop()
    return not lines or not lines[-1].strip()


def _save(ctx: Ctx, doc: Any, current: Fix) -> None:
    """Write the edited ``doc`` over its file, atomically, once it validates."""
    _spaced(doc)
    path, text = ctx.path, tomlkit.dumps(doc).rstrip("\n") + "\n"
    build_fix(ctx, loads(path, text), current.patch_dir)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["aligned", "new_manifest_text", "bump_manifest", "add_release", "add_variant",
           "add_variant_release", "set_upstream", "variant_dir"]

"""Property-based tests (hypothesis) of the patch parser, the hunk placer and the manifest loader,
and an apply + rollback round trip through the engine.

Random and mutated input may only ever fail with a patchkit error (never a bare ValueError,
IndexError, ...); a generated valid change applied and rolled back restores the exact bytes and
touches nothing outside the target root (a sibling directory is compared after every example).
Every property runs ``EXAMPLES`` examples (the round trip ``ROUND_TRIPS``), derandomized so a CI run is reproducible; the total
is in docs/reliability.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.errors import PatchkitError
from patchkit.engine import run
from patchkit.engine.hunks import FileChange, apply_change, decode, encode
from patchkit.catalog.manifest import load_manifest
from patchkit.catalog.series import diff_files, parse_patch
from tests.engine.helpers import fix, make_checkout, request

EXAMPLES = 200
ROUND_TRIPS = 100  # each one fsyncs a whole transaction twice: the slow property gets fewer
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ROUND_TRIP = settings(FUZZ, max_examples=ROUND_TRIPS)

SAMPLES = Path(__file__).parent / "samples" / "catalog"
PATCHES = sorted((SAMPLES / "patches").glob("*/*.patch"))
MANIFESTS = sorted((SAMPLES / "manifests").glob("*.toml"))


def mutate(data: bytes, edits: List[Any]) -> bytes:
    """Apply byte-level edits: (kind, position fraction, payload)."""
    out = bytearray(data)
    for kind, where, payload in edits:
        pos = int(where * len(out)) if out else 0
        if kind == "insert":
            out[pos:pos] = payload
        elif kind == "delete":
            del out[pos:pos + len(payload) + 1]
        elif kind == "replace":
            out[pos:pos + len(payload)] = payload
        elif kind == "dup-line":
            lines = bytes(out).split(b"\n")
            i = int(where * len(lines))
            lines.insert(i, lines[min(i, len(lines) - 1)])
            out = bytearray(b"\n".join(lines))
        else:  # drop-line
            lines = bytes(out).split(b"\n")
            if lines:
                del lines[int(where * len(lines)) % len(lines)]
            out = bytearray(b"\n".join(lines))
    return bytes(out)


TOKENS = [b"@@ ", b" @@", b"-", b"+", b" ", b"\\ No newline at end of file\n", b"\r\n", b"\n",
          b"--- a/", b"+++ b/", b"diff --git a/x b/x\n", b"/dev/null", b"../", b"\x00", b"\xff\xfe",
          b"-1,0", b"+0,0", b"99999999999999999999", b"new file mode 100755\n", b"Binary files",
          b"GIT binary patch\n", b'"', b"rename from x\n", b"= 1\n", b"[[patches]]\n", b'"\n']
edits = st.lists(st.tuples(st.sampled_from(["insert", "delete", "replace", "dup-line", "drop-line"]),
                           st.floats(0, 1, exclude_max=True),
                           st.one_of(st.sampled_from(TOKENS), st.binary(max_size=12))),
                 min_size=1, max_size=6)


@FUZZ
@given(base=st.sampled_from(PATCHES), changes=edits)
def test_mutated_patches_parse_or_fail_with_a_patchkit_error(base: Path, changes: List[Any]) -> None:
    data = mutate(base.read_bytes(), changes)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "0001-x.patch")
        path.write_bytes(data)
        try:
            records = parse_patch(path, "sglang")
        except PatchkitError as err:
            assert str(path) in str(err)  # the error names the file
            return
    for record in records:
        assert record["root"] == "sglang" and record["op"] in ("create", "modify", "delete")
        for hunk in record["hunks"]:
            assert all(kind in (" ", "-", "+") for kind, _text in hunk["lines"])


@FUZZ
@given(data=st.binary(max_size=400))
def test_random_bytes_parse_or_fail_with_a_patchkit_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "0001-x.patch")
        path.write_bytes(data)
        try:
            parse_patch(path, "sglang")
        except PatchkitError:
            pass


line_text = st.one_of(st.sampled_from(["a\n", "b\n", "c\n", "\n", "x\r\n", "tail"]),
                      st.text(alphabet="abc \t\r", max_size=6).map(lambda s: s + "\n"))
raw_hunk = st.fixed_dictionaries({
    "old_start": st.integers(-3, 30), "old_count": st.integers(-1, 8),
    "new_start": st.integers(-3, 30), "new_count": st.integers(-1, 8),
    "lines": st.lists(st.tuples(st.sampled_from([" ", "-", "+", "?"]), line_text).map(list),
                      max_size=8)})


@FUZZ
@given(text=st.one_of(st.none(), st.lists(line_text, max_size=25).map("".join)),
       op=st.sampled_from(["modify", "create", "delete", "rename"]),
       hunks=st.lists(raw_hunk, max_size=4))
def test_random_hunks_place_or_fail_with_a_patchkit_error(text: Optional[str], op: str,
                                                          hunks: List[Dict[str, Any]]) -> None:
    record = {"root": "sglang", "path": "python/sglang/x.py", "patch": "0001-x.patch", "op": op,
              "hunks": hunks}
    try:
        change = FileChange.from_dict(record, "fuzz")
        new, placements = apply_change(text, change)
    except PatchkitError:
        return
    assert new is None or isinstance(new, str)
    assert len(placements) == len(change.hunks)


@FUZZ
@given(base=st.sampled_from(MANIFESTS), changes=edits)
def test_mutated_manifests_load_or_fail_with_a_patchkit_error(base: Path, changes: List[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Path(tmp)
        shutil.copytree(SAMPLES, catalog, dirs_exist_ok=True)
        path = catalog / "manifests" / base.name
        path.write_bytes(mutate(base.read_bytes(), changes))
        try:
            loaded = load_manifest(path)
        except PatchkitError as err:
            assert base.name in str(err)  # the error names the manifest
            return
        assert loaded.name == base.stem and loaded.patches


# -- apply + rollback round trip through the engine --------------------------------------------

content_line = st.one_of(
    st.sampled_from(["def f():\n", "    return 1\n", "\n", "x = 1\r\n", "# \u00e9t\u00e9\n"]),
    st.binary(min_size=1, max_size=8).map(lambda b: decode(b.replace(b"\n", b"") + b"\n")))


@st.composite
def file_edit(draw: Any) -> Dict[str, Any]:
    op = draw(st.sampled_from(["modify", "modify", "create", "delete"]))
    before = None if op == "create" else draw(st.lists(content_line, min_size=1, max_size=30))
    if op == "delete":
        after = None
    elif op == "create":
        after = draw(st.lists(content_line, min_size=1, max_size=10))
    else:
        after = list(before or [])
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(after)))
            kind = draw(st.sampled_from(["ins", "del", "sub"]))
            if kind == "ins" or not after:
                after.insert(i, draw(content_line))
            elif kind == "del":
                del after[min(i, len(after) - 1)]
            else:
                after[min(i, len(after) - 1)] = draw(content_line)
    if draw(st.booleans()):  # no newline at end of file, on either side
        if before:
            before[-1] = before[-1].rstrip("\n")
        elif after:
            after[-1] = after[-1].rstrip("\n")
    old = None if before is None else "".join(before)
    new = None if after is None else "".join(after)
    if old == new:  # a change must change something
        new = (new or "") + "changed\n"
    return {"op": op, "before": old, "after": new}


def tree_digest(top: Path) -> Dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, top)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
        for name in _dirs:
            out[os.path.relpath(os.path.join(dirpath, name), top) + "/"] = "dir"
    return out


@ROUND_TRIP
@given(changes=st.lists(file_edit(), min_size=1, max_size=3))
def test_apply_then_rollback_restores_the_exact_bytes(changes: List[Dict[str, Any]]) -> None:
    """A generated change, written as a git-style patch, parsed, applied and rolled back."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = make_checkout(base, git_repo=False)
        sibling = base / "sibling"
        sibling.mkdir()
        (sibling / "keep.py").write_bytes(b"untouched\n")
        text, paths = "", []
        for i, change in enumerate(changes):
            path = "python/sglang/srt/sub%d/f%d.py" % (i % 2, i)
            paths.append(path)
            if change["before"] is not None:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(encode(change["before"]))
            text += diff_files(None if change["before"] is None else encode(change["before"]),
                               None if change["after"] is None else encode(change["after"]), path)
        patch = base / "0001-x.patch"  # the patch file as a fix author would ship it
        patch.write_bytes(encode(text))
        records = parse_patch(patch, "sglang")
        assert [r["path"] for r in records] == paths
        before_root, before_base = tree_digest(root), tree_digest(base)
        f = fix("fuzz", records)
        applied = run(request("apply", {"sglang": root}, [f]))
        assert applied["ok"], applied["error"]
        for i, change in enumerate(changes):
            p = root / paths[i]
            if change["after"] is None:
                assert not p.exists()
            else:
                assert p.read_bytes() == encode(change["after"])
        rolled = run(request("rollback", {"sglang": root}, [f]))
        assert rolled["ok"], rolled["error"]
        after_root = {k: v for k, v in tree_digest(root).items() if not k.startswith(".patchkit")}
        assert after_root == before_root
        outside = {k: v for k, v in tree_digest(base).items()
                   if not k.startswith("sglang" + os.sep + ".patchkit")}
        assert outside == before_base  # nothing outside the root was written
        assert tree_digest(sibling) == {"keep.py": hashlib.sha256(b"untouched\n").hexdigest()}

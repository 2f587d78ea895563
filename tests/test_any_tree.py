"""Any tree, not only SGLang (issue 25, item 16): a fix whose patches belong to a root other
than ``sglang`` is imported without an SGLang release and applied with only the roots it
uses (``--root tree=DIR``, no ``--target``). Tested on patches no one here wrote: python-patch's
test corpus (tests/samples/python-patch/README.md), an hg diff at -p1 and an svn diff at -p0
of a CRLF file, applied byte-identical to the corpus's expected results. Line endings are
judged against the tree when the patch is applied, never guessed at import.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.errors import EXIT_CONFLICT
from tests.test_authoring import flat, patchkit
from tests.test_interop_hostile import DIFF, crlf, dep3
from tests.test_remote import snapshot

CORPUS = Path(__file__).parent / "samples" / "python-patch"


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but patchkit's own state, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] != ".patchkit"}


def ok(catalog: Path, *args: str) -> str:
    result = patchkit(catalog, *args)
    assert result.exit_code == 0, result.output
    return flat(result.output)


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no SGLang checkout around: the run has only --root's trees
    root = tmp_path / "fixes"
    ok(root, "init", str(root))
    return root


def series_dir(where: Path, patches: dict[str, tuple[bytes, str]]) -> Path:
    """A quilt series as a packager keeps foreign patches: each file the corpus's patch byte
    for byte behind a DEP-3 Description (the corpus's diffs carry no title of their own)."""
    where.mkdir()
    for name, (data, _level) in patches.items():
        (where / name).write_bytes(b"Description: " + name.encode() + b" from python-patch\n\n"
                                   + data)
    (where / "series").write_text("".join(f"{n} {lv}\n" for n, (_d, lv) in patches.items()))
    return where


def test_a_peer_tools_corpus_imports_and_applies_to_a_tree_that_is_not_sglang(
        catalog: Path, tmp_path: Path) -> None:
    quilt = series_dir(tmp_path / "q", {
        "06nested.patch": ((CORPUS / "hg" / "06nested.patch").read_bytes(), "-p1"),
        "manifest.patch": ((CORPUS / "svn" / "manifest.patch").read_bytes(), "-p0")})
    # No --release: the patches belong to no SGLang root, so no release is checked. The svn
    # diff is CRLF throughout, as the file it patches: it is not refused at import.
    out = ok(catalog, "import", "--quilt", str(quilt), "--root", "tree", "--one", "--name", "pyglet")
    assert "imported pyglet v1" in out
    fix = Catalog(catalog).get("pyglet")
    assert fix.upstream.releases == () or list(fix.upstream.releases) == []
    assert fix.upstream.root == "tree" and {p.root for p in fix.patches} == {"tree"}

    tree = tmp_path / "tree"
    shutil.copytree(CORPUS / "hg" / "tree", tree)
    shutil.copy(CORPUS / "svn" / "tree" / "manifest.xml", tree)
    original = files(tree)
    out = ok(catalog, "apply", "pyglet", "--root", f"tree={tree}")
    assert f"apply on tree={tree}" in out and "applied pyglet v1" in out
    expected = files(CORPUS / "hg" / "expected")
    expected["manifest.xml"] = (CORPUS / "svn" / "expected" / "manifest.xml").read_bytes()
    assert files(tree) == expected  # byte-identical to the corpus's results, CRLF kept
    assert b"\r\n" in expected["manifest.xml"]

    assert "pyglet\tapplied\tv1" in patchkit(catalog, "status", "--root", f"tree={tree}").output
    ok(catalog, "rollback", "pyglet", "--root", f"tree={tree}")
    assert files(tree) == original


def test_a_hunk_whose_line_endings_differ_from_the_files_is_refused_at_apply_naming_them(
        catalog: Path, tmp_path: Path) -> None:
    """python-patch's svn diff of conf.h: CRLF headers, LF hunk lines, a CRLF file (GNU patch
    --binary refuses it too). Imported as it is; refused when applied, saying which ending
    each side has, the tree left as it was."""
    quilt = series_dir(tmp_path / "q", {
        "conf-h.patch": ((CORPUS / "svn" / "conf-h.patch").read_bytes(), "-p0")})
    ok(catalog, "import", "--quilt", str(quilt), "--root", "tree", "--name", "conf")
    tree = tmp_path / "tree"
    shutil.copytree(CORPUS / "svn" / "tree", tree)
    before = snapshot({"tree": str(tree)}, state=True)
    result = patchkit(catalog, "apply", "conf", "--root", f"tree={tree}")
    assert result.exit_code == EXIT_CONFLICT, result.output
    message = flat(result.output)
    assert "tree:conf.h: hunk #1" in message
    assert "the line ends in LF (\\n) in the patch and in CRLF (\\r\\n) in the file" in message
    assert "different line endings" in message
    assert snapshot({"tree": str(tree)}, state=True) == before


def test_a_patch_converted_to_crlf_is_judged_against_the_lf_tree_not_at_import(
        catalog: Path, tmp_path: Path) -> None:
    """A DEP-3 patch an editor turned CRLF imports (the tree could be CRLF); applied to an
    LF file it is refused naming the line endings, and the file is unchanged."""
    quilt = tmp_path / "q"
    quilt.mkdir()
    (quilt / "one.patch").write_bytes(crlf(dep3(DIFF.replace(b"python/sglang/a.py", b"a.py"))))
    (quilt / "series").write_text("one.patch\n")
    ok(catalog, "import", "--quilt", str(quilt), "--root", "tree", "--name", "two")
    assert Catalog(catalog).get("two").title == "a: two is twenty-two"
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_bytes(b"one = 1\ntwo = 2\nthree = 3\n")
    result = patchkit(catalog, "apply", "two", "--root", f"tree={tree}")
    assert result.exit_code == EXIT_CONFLICT, result.output
    assert "ends in CRLF (\\r\\n) in the patch and in LF (\\n) in the file" in flat(result.output)
    assert (tree / "a.py").read_bytes() == b"one = 1\ntwo = 2\nthree = 3\n"
    # The same patch on a CRLF tree applies, CRLF kept.
    (tree / "a.py").write_bytes(b"one = 1\r\ntwo = 2\r\nthree = 3\r\n")
    ok(catalog, "apply", "two", "--root", f"tree={tree}")
    assert (tree / "a.py").read_bytes() == b"one = 1\r\ntwo = 22\r\nthree = 3\r\n"


def test_no_root_at_all_is_still_refused_saying_how_to_name_one(catalog: Path) -> None:
    result = patchkit(catalog, "status")
    assert result.exit_code != 0
    message = flat(result.output)
    assert "no target given" in message and "--root NAME=PATH" in message

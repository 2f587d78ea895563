"""A catalog directory: lookup, dependency order, cycles, lineage, discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

import patchkit
from patchkit import catalog as catalog_module
from patchkit.catalog import Catalog
from patchkit.errors import ManifestError, UnknownFixError, UsageError
from patchkit.catalog.edit import new_manifest_text
from patchkit.catalog.series import diff_files

SAMPLE = Path(__file__).parent / "samples" / "catalog"


def add_fix(root: Path, name: str, depends_on: tuple[str, ...] = (), *,
            supersedes: tuple[str, ...] = ()) -> None:
    """A real fix: a manifest from the authoring skeleton and a one-hunk patch."""
    (root / "manifests").mkdir(parents=True, exist_ok=True)
    (root / "patches" / name).mkdir(parents=True, exist_ok=True)
    (root / "patches" / name / "0001-a.patch").write_text(
        diff_files(b"old\n", f"{name}\n".encode(), f"python/sglang/{name}.py"))
    text = new_manifest_text(name, f"Fix {name}", "0.5.21", [("0001-a.patch", "sglang")],
                             date="2026-01-01")
    text = text.replace("depends_on = []", f"depends_on = {list(depends_on)!r}".replace("'", '"'))
    if supersedes:
        text = text.replace("\n[upstream]", f"\nsupersedes = {list(supersedes)!r}\n[upstream]"
                            .replace("'", '"'))
    (root / "manifests" / f"{name}.toml").write_text(text)


def test_names_get_all() -> None:
    cat = Catalog(SAMPLE)
    assert cat.names() == ["index-k-bytes", "old-index-k", "pool-guard"]
    assert cat.get("pool-guard") is cat.get("pool-guard")  # loaded once
    assert [f.name for f in cat.all()] == cat.names()
    assert cat.get("pool-guard").patch_dir == SAMPLE / "patches" / "pool-guard"


def test_unknown_fix_lists_close_names() -> None:
    with pytest.raises(UnknownFixError, match="Did you mean pool-guard") as info:
        Catalog(SAMPLE).get("pool-gaurd")
    assert info.value.details["suggestions"] == ["pool-guard"]
    assert info.value.details["name"] == "pool-gaurd"


def test_a_directory_without_manifests_is_not_a_catalog(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no manifests/"):
        Catalog(tmp_path)


def test_dependency_order(tmp_path: Path) -> None:
    for name, deps in (("base", ()), ("mid", ("base",)), ("top", ("mid",)), ("solo", ()),
                       ("side", ("base",))):
        add_fix(tmp_path, name, deps)
    cat = Catalog(tmp_path)
    names = lambda fixes: [f.name for f in fixes]  # noqa: E731
    assert names(cat.dependency_order(["top"])) == ["top"]
    assert names(cat.dependency_order(["top"], with_deps=True)) == ["base", "mid", "top"]
    # Without deps, the named fixes still come in dependency order, even through a gap.
    assert names(cat.dependency_order(["top", "solo", "base"])) == ["base", "top", "solo"]
    assert names(cat.dependency_order(["side", "top"], with_deps=True)) == [
        "base", "side", "mid", "top"]
    assert names(cat.dependents("base")) == ["mid", "side", "top"]
    assert names(cat.dependents("base", transitive=False)) == ["mid", "side"]
    assert cat.dependents("solo") == []


def test_cycle_is_named_with_its_files(tmp_path: Path) -> None:
    add_fix(tmp_path, "a", ("b",))
    add_fix(tmp_path, "b", ("c",))
    add_fix(tmp_path, "c", ("a",))
    with pytest.raises(ManifestError, match=r"a -> b -> c -> a") as info:
        Catalog(tmp_path).dependency_order(["a"])
    for name in "abc":
        assert str(tmp_path / "manifests" / f"{name}.toml") in info.value.message
    assert info.value.details["cycle"] == ["a", "b", "c", "a"]


def test_unknown_dependency_names_it_and_the_manifest(tmp_path: Path) -> None:
    add_fix(tmp_path, "needs-ghost", ("ghost",))
    with pytest.raises(ManifestError, match="depends_on names 'ghost'") as info:
        Catalog(tmp_path).dependency_order(["needs-ghost"], with_deps=True)
    path = tmp_path / "manifests" / "needs-ghost.toml"
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.startswith("depends_on"))
    assert info.value.details == {"file": str(path), "key": "depends_on", "line": line}
    assert info.value.message.startswith(f"{path}:{line}: depends_on names 'ghost'")  # FILE:LINE


def test_a_lineage_link_to_an_absent_fix_names_its_line(tmp_path: Path) -> None:
    add_fix(tmp_path, "new", supersedes=("gone",))
    path = tmp_path / "manifests" / "new.toml"
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.startswith("supersedes"))
    with pytest.raises(ManifestError) as info:
        Catalog(tmp_path).validate()
    assert info.value.message.startswith(f"{path}:{line}: supersedes names 'gone'")


def test_validate_checks_lineage_and_stray_series(tmp_path: Path) -> None:
    add_fix(tmp_path, "old")
    add_fix(tmp_path, "new", supersedes=("old",))
    cat = Catalog(tmp_path)
    assert [f.name for f in cat.validate()] == ["new", "old"]
    assert [f.name for f in cat.replacements("old")] == ["new"]
    (tmp_path / "patches" / "orphan").mkdir()
    with pytest.raises(ManifestError, match="series without a manifest: orphan"):
        Catalog(tmp_path).validate()
    (tmp_path / "patches" / "orphan").rmdir()
    (tmp_path / "manifests" / "old.toml").unlink()
    (tmp_path / "patches" / "old" / "0001-a.patch").unlink()
    (tmp_path / "patches" / "old").rmdir()
    with pytest.raises(ManifestError, match="supersedes names 'old'"):
        Catalog(tmp_path).validate()


def test_discover_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHKIT_CATALOG", str(SAMPLE))
    assert Catalog.discover(tmp_path).root == SAMPLE
    monkeypatch.setenv("PATCHKIT_CATALOG", str(tmp_path))
    with pytest.raises(UsageError, match="PATCHKIT_CATALOG="):
        Catalog.discover()


def test_discover_walks_up_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATCHKIT_CATALOG", raising=False)
    add_fix(tmp_path, "x")
    deep = tmp_path / "patches" / "x" / "checks"
    deep.mkdir()
    monkeypatch.chdir(deep)
    assert Catalog.discover().root == tmp_path.resolve()
    assert Catalog.discover(deep).names() == ["x"]


def test_discover_falls_back_to_the_shipped_catalog(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATCHKIT_CATALOG", raising=False)
    shipped = Path(patchkit.__file__).resolve().parent.parent
    if (shipped / "manifests").is_dir():
        assert Catalog.discover(tmp_path).root == shipped
    monkeypatch.setattr(catalog_module, "shipped_catalog_root", lambda: None)
    with pytest.raises(UsageError, match="no patchkit catalog found") as info:
        Catalog.discover(tmp_path)
    assert "PATCHKIT_CATALOG" in info.value.message


def test_validate_names_an_unknown_fix_in_a_revert_table(tmp_path: Path) -> None:
    # A [revert] fix name is resolved only on a target otherwise; the catalog check finds a
    # typo before any host is touched.
    import shutil

    cat = tmp_path / "catalog"
    shutil.copytree(SAMPLE, cat)
    manifest = next((cat / "manifests").glob("*.toml"))
    manifest.write_text(manifest.read_text() + '\n[revert]\nfix = "no-such-fix"\n')
    with pytest.raises(ManifestError) as exc:
        Catalog(cat).validate()
    assert "no-such-fix" in str(exc.value) and "revert.fix" in str(exc.value)
    assert manifest.name in str(exc.value)


def test_an_inactive_fix_is_refused_with_what_replaces_or_reverts_it() -> None:
    """A dead fix whose only replacement is its own revert was answered "it was replaced by
    revert-...; apply that instead", as if the revert were a new version of it."""
    repo = Path(__file__).resolve().parent.parent
    with pytest.raises(UsageError) as dead:
        Catalog(repo).apply_order(["hicache-index-k-sync"])
    said = str(dead.value)
    assert "revert-hicache-index-k-sync reverts it where it was applied or committed" in said
    assert "instead" not in said and "--allow-inactive" in said
    with pytest.raises(UsageError) as superseded:
        Catalog(Path(__file__).parent / "samples" / "catalog").apply_order(["old-index-k"])
    assert "it was replaced by pool-guard; apply that instead" in str(superseded.value)


@pytest.mark.parametrize("text, said", [("0.5.22..", "give both ends"), ("..0.5.23", "give both ends")])
def test_matrix_release_range_without_an_end_is_refused_saying_so(text: str, said: str) -> None:
    """`--releases 0.5.22..` said "unsupported SGLang version ''"."""
    from patchkit.matrix import parse_releases

    with pytest.raises(UsageError, match=said):
        parse_releases(text, ["0.5.22", "0.5.23"])


def test_matrix_release_list_names_each_release_once() -> None:
    """`--releases 0.5.22,0.5.23,0.5.22` checked 0.5.22 twice and printed its rows twice."""
    from patchkit.matrix import parse_releases

    assert parse_releases("0.5.22,0.5.23,0.5.22", []) == ["0.5.22", "0.5.23"]


def test_a_depends_on_cycle_is_an_error_row_of_each_fix_on_it_and_those_above(tmp_path: Path) -> None:
    """A cycle made by hand in the manifests: apply, rollback, sync and log refused it, but
    ``list`` and ``status`` (``readable``) showed its fixes as fine (a trial). A fix on the
    cycle cannot be ordered, as one depending on a broken manifest cannot: each is an error
    row naming the cycle and its files, and so is a fix depending on one; the rest read."""
    add_fix(tmp_path, "a", ("b",))
    add_fix(tmp_path, "b", ("a",))
    add_fix(tmp_path, "above", ("a",))
    add_fix(tmp_path, "solo")
    fixes, broken = Catalog(tmp_path).readable()
    assert [f.name for f in fixes] == ["solo"]
    rows = {b.name: b for b in broken}
    assert sorted(rows) == ["a", "above", "b"]
    for name in "ab":
        assert "depends_on forms a cycle" in rows[name].message, rows[name]
        assert rows[name].file == str(tmp_path / "manifests" / f"{name}.toml")
        assert rows[name].line is not None  # the depends_on line
        for other in "ab":
            assert str(tmp_path / "manifests" / f"{other}.toml") in rows[name].message
    assert "depends on a" in rows["above"].message

"""`patchkit upstream check`: does a real SGLang release already contain a fix?

Fixes are made from the real drift between 0.5.21 and 0.5.23 (``catalog_upstream``): a
file's whole upstream change (its patch-id is that of the v0.5.23 commit), the same change
with more context lines (another patch-id; its reversed hunks apply to 0.5.23), a change
0.5.23 holds but in another form (only its verification grep tells), and a local edit
0.5.23 does not have. The shipped catalog is checked too, and `patchkit rebase` must decide
the contained fixes as `upstream check` does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import rebase
from patchkit.catalog import Catalog
from patchkit.catalog.edit import new_manifest_text
from patchkit.catalog.series import diff_files
from patchkit.rebase.contains import check, contains
from patchkit.errors import EXIT_USAGE
from patchkit.upstream import UpstreamRepo

from tests.test_rebase_real import _blob, _git  # the release store read as git objects

pytestmark = pytest.mark.network

REPO = Path(__file__).resolve().parent.parent


def _write(cat: Path, name: str, base: str, patch: str, extra: str = "") -> None:
    (cat / "patches" / name).mkdir(parents=True)
    (cat / "patches" / name / f"0001-{name}.patch").write_text(patch)
    text = new_manifest_text(name, f"{name} title", base, [(f"0001-{name}.patch", "sglang")],
                             "A fix on a real release.", date="2026-11-01")
    (cat / "manifests").mkdir(exist_ok=True)
    (cat / "manifests" / f"{name}.toml").write_text(text + extra)


def _modified(git_dir: Path) -> list[tuple[int, int, str]]:
    """(lines changed, lines removed, path) of the .py files 0.5.23 modified, smallest first."""
    found = []
    for line in _git(git_dir, "diff", "--numstat", "--diff-filter=M", "v0.5.21", "v0.5.23",
                     "--", "python/sglang/srt").splitlines():
        added, removed, path = line.split("\t")
        if path.endswith(".py") and added != "-":
            found.append((int(added) + int(removed), int(removed), path))
    return sorted(found)


def _new_line(git_dir: Path, path: str) -> str | None:
    """A line of ``path`` in 0.5.23 that 0.5.21's file does not have anywhere."""
    old = _blob(git_dir, "v0.5.21", path).decode()
    for line in _blob(git_dir, "v0.5.23", path).decode().splitlines():
        text = line.strip()
        if len(text) > 12 and text not in old:
            return text
    return None


@pytest.fixture(scope="module")
def made(catalog_upstream: UpstreamRepo, tmp_path_factory: pytest.TempPathFactory):
    """A git catalog of four fixes on 0.5.21 and the files each one changes."""
    git_dir = Path(catalog_upstream.git_dir)
    cat = tmp_path_factory.mktemp("upcheck") / "catalog"
    modified = _modified(git_dir)
    whole, wider, other = (m[2] for m in modified[:3])
    _write(cat, "whole-change", "0.5.21", diff_files(
        _blob(git_dir, "v0.5.21", whole), _blob(git_dir, "v0.5.23", whole), whole))
    _write(cat, "wider-context", "0.5.21",
           _git(git_dir, "diff", "-U7", "v0.5.21", "v0.5.23", "--", wider))
    reshaped, added = next((p, line) for _n, removed, p in modified[3:]
                           if removed > 0 and (line := _new_line(git_dir, p)))
    _write(cat, "reshaped", "0.5.21", diff_files(
        _blob(git_dir, "v0.5.21", reshaped),
        _blob(git_dir, "v0.5.23", reshaped) + b"# kept here until upstream takes it\n", reshaped),
        f'\n[[verification]]\nkind = "grep"\nroot = "sglang"\npath = "{reshaped}"\n'
        f"pattern = {json.dumps(added)}\npresent = true\n")
    touched = {p for _n, _r, p in modified}
    local = next(p for p in _git(git_dir, "ls-tree", "-r", "--name-only", "v0.5.21",
                                 "python/sglang/srt").split()
                 if p.endswith(".py") and p not in touched and p != other)
    before = _blob(git_dir, "v0.5.21", local)
    _write(cat, "local-edit", "0.5.21", diff_files(before, before + b"# a local edit\n", local))
    subprocess.run(["git", "init", "-q", "-b", "main", str(cat)], check=True)
    subprocess.run(["git", "-C", str(cat), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(cat), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-m", "fixes on 0.5.21"], check=True)
    return cat, {"whole-change": whole, "wider-context": wider, "reshaped": reshaped,
                 "local-edit": local}


@pytest.fixture
def catalog_dir(made, tmp_path: Path) -> Path:
    """A private copy (with its git history) a test may write."""
    cat = tmp_path / "catalog"
    shutil.copytree(made[0], cat)
    return cat


def _snapshot(cat: Path) -> dict[str, bytes]:
    return {str(p.relative_to(cat)): p.read_bytes() for p in sorted(cat.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(cat).parts}


def _head(cat: Path) -> str:
    return subprocess.run(["git", "-C", str(cat), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def run(args: list[str], upstream: UpstreamRepo, monkeypatch: pytest.MonkeyPatch
        ) -> tuple[int, str, str]:
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(upstream.path))
    proc = subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True,
                          text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_each_test_decides_on_the_real_release(made, catalog_upstream: UpstreamRepo) -> None:
    cat, files = made
    catalog = Catalog(cat)
    v0523 = catalog_upstream.release("0.5.23").commit
    verdicts = {v.fix: v for v in check(catalog, sorted(files), "0.5.23",
                                        upstream=catalog_upstream)}
    whole = verdicts["whole-change"]
    assert (whole.verdict, whole.test, whole.commits) == ("contained", "patch-id", (v0523,))
    assert whole.files == (files["whole-change"],)
    wider = verdicts["wider-context"]
    assert (wider.verdict, wider.test, wider.commits) == ("contained", "reverse-apply", ())
    reshaped = verdicts["reshaped"]
    assert (reshaped.verdict, reshaped.test) == ("contained", "verification")
    assert reshaped.files == (files["reshaped"],)
    assert verdicts["local-edit"].verdict == "not-contained"
    # the base release holds none of them: each test is about the change, not the file
    assert {v.fix: v.verdict for v in check(catalog, sorted(files), "0.5.21",
                                            upstream=catalog_upstream)} == dict.fromkeys(
        files, "not-contained")


def test_a_release_older_than_the_fix_is_not_asked_and_never_marked(
        made, catalog_dir: Path, catalog_upstream: UpstreamRepo, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """A fix written on 0.5.23 that takes back 0.5.23's change to a file: 0.5.21 never had
    that change, so its reversed hunks apply there, which read as "contained by reverse-apply"
    and --mark made the fix upstream since 0.5.21, so not needed on 0.5.23, where the change
    it removes still is. A release older than the fix's base cannot have taken a change
    written on the base: it is not asked, and nothing is marked."""
    whole = made[1]["whole-change"]
    git_dir = Path(catalog_upstream.git_dir)
    _write(catalog_dir, "take-back", "0.5.23", diff_files(
        _blob(git_dir, "v0.5.23", whole), _blob(git_dir, "v0.5.21", whole), whole))
    subprocess.run(["git", "-C", str(catalog_dir), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(catalog_dir), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-m", "take-back"], check=True)
    verdict = contains(Catalog(catalog_dir), "take-back", "0.5.21", upstream=catalog_upstream)
    assert verdict.verdict == "not-applicable", verdict
    assert "0.5.21 is older than its base release 0.5.23" in verdict.detail
    assert contains(Catalog(catalog_dir), "take-back", "0.5.23",
                    upstream=catalog_upstream).verdict == "not-contained"
    before, head = _snapshot(catalog_dir), _head(catalog_dir)
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "take-back",
                          "--release", "0.5.21", "--mark"], catalog_upstream, monkeypatch)
    assert code == 0 and "not applicable" in out and "marked" not in out, (out, err)
    assert _snapshot(catalog_dir) == before and _head(catalog_dir) == head


def test_shipped_fixes_are_not_in_their_own_release(catalog_upstream: UpstreamRepo) -> None:
    shipped = Catalog(REPO)
    for name in ("dsv4-bf16-sizing", "dsv4-bf16-index-k", "hicache-index-k-sync"):
        verdict = contains(shipped, name, "0.5.23", upstream=catalog_upstream)
        assert verdict.verdict == "not-contained", verdict
    serve = contains(shipped, "prefill-hicache-off", "0.5.23", upstream=catalog_upstream)
    assert serve.verdict == "not-applicable" and "serve" in serve.detail
    # the reverted commit was the fork's: no release ever had it, so no release can say
    revert = contains(shipped, "revert-hicache-index-k-sync", "0.5.23", upstream=catalog_upstream)
    assert revert.verdict == "not-applicable" and "commit of the fork" in revert.detail


def test_a_revert_fix_of_a_change_no_release_had_is_not_applicable(
        catalog_dir: Path, catalog_upstream: UpstreamRepo) -> None:
    """No series of its own: the reverted fix's series, reversed, is what is tested."""
    for name, reverted in (("undo-local", "local-edit"), ("undo-whole", "whole-change")):
        (catalog_dir / "manifests" / f"{name}.toml").write_text(
            f'format = 1\nname = "{name}"\nversion = 1\ntitle = "Revert {reverted}"\n'
            f'status = "active"\nrationale = "Why."\n\n[upstream]\nbase_release = "0.5.21"\n'
            f'releases = ["0.5.21"]\n\n[revert]\nfix = "{reverted}"\n')
    catalog = Catalog(catalog_dir)
    verdicts = {v.fix: v for v in check(catalog, ["undo-local", "undo-whole"], "0.5.23",
                                        upstream=catalog_upstream)}
    # no release ever had the local edit: its revert is the fork's business, not SGLang's
    assert verdicts["undo-local"].verdict == "not-applicable", verdicts["undo-local"]
    # 0.5.23 took the whole change upstream: the revert is still needed there
    assert verdicts["undo-whole"].verdict == "not-contained"


def test_rebase_decides_a_contained_fix_as_check_does(made, catalog_dir: Path,
                                                       catalog_upstream: UpstreamRepo) -> None:
    catalog = Catalog(catalog_dir)
    names = ["whole-change", "wider-context"]
    verdicts = {v.fix: v for v in check(catalog, names, "0.5.23", upstream=catalog_upstream)}
    report = rebase.start(catalog, "0.5.23", names, upstream=catalog_upstream, dry_run=True)
    for fix in report.fixes:
        assert fix.outcome == "upstreamed", fix
        assert [p.classification for p in fix.patches] == ["upstream"]
        assert fix.patches[0].commit == "".join(verdicts[fix.name].commits)


def test_cli_says_a_line_per_fix_and_exit_code_flags_contained_ones(
        catalog_dir: Path, catalog_upstream: UpstreamRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    v0523 = catalog_upstream.release("0.5.23").commit
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "--release",
                          "0.5.23"], catalog_upstream, monkeypatch)
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert f"contained by patch-id {v0523[:12]}" in lines["whole-change"]
    assert "contained by reverse-apply" in lines["wider-context"]
    assert "contained by verification greps" in lines["reshaped"]
    assert "not contained" in lines["local-edit"]
    # piped: FIX<TAB>VERDICT<TAB>EVIDENCE, no padding, so cut -f2 reads `not contained` whole
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    assert rows["local-edit"][1] == "not contained" and len(rows["local-edit"]) == 3
    assert rows["whole-change"][1] == f"contained by patch-id {v0523[:12]}"
    assert all(len(r) == 3 and r[0] == r[0].strip() and r[2] == r[2].strip()
               for r in rows.values()), out
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "local-edit",
                          "whole-change", "--release", "0.5.23", "--exit-code", "--json"],
                         catalog_upstream, monkeypatch)
    assert code == 1, err
    data = json.loads(out)
    assert [(f["fix"], f["verdict"]) for f in data["fixes"]] == [
        ("local-edit", "not-contained"), ("whole-change", "contained")]
    code, _out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "local-edit",
                           "--release", "0.5.23", "--exit-code"], catalog_upstream, monkeypatch)
    assert code == 0, err


def test_mark_records_upstream_since_the_release_keeping_the_version_and_commits_it(
        catalog_dir: Path, catalog_upstream: UpstreamRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _snapshot(catalog_dir)
    head = _head(catalog_dir)
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "whole-change",
                          "local-edit", "--release", "0.5.23", "--mark"], catalog_upstream,
                         monkeypatch)
    assert code == 0, err
    assert "marked whole-change v1: status upstreamed, applied 0.5.23" in out
    fix = Catalog(catalog_dir).get("whole-change")
    # the version stays: a host on an earlier release keeps running v1 (issue 24)
    assert (fix.version, fix.status, fix.upstream.applied) == (1, "upstreamed", "0.5.23")
    assert fix.changelog[-1].version == 1
    text = fix.manifest_path.read_text()  # in [upstream] by its keys, the comments kept
    assert text.index("reference = ") < text.index('applied = "0.5.23"') < text.index(
        "# The series") and "# active | dead | superseded | upstreamed" in text
    # one commit, of that fix alone; the other fix and the series are untouched
    log = subprocess.run(["git", "-C", str(catalog_dir), "log", "--format=%s", f"{head}..HEAD"],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(log) == 1 and log[0].startswith("whole-change v1: Upstreamed in 0.5.23")
    assert subprocess.run(["git", "-C", str(catalog_dir), "status", "--porcelain"],
                          capture_output=True, text=True).stdout == ""
    after = _snapshot(catalog_dir)
    assert {k for k in after if after[k] != before.get(k)} == {"manifests/whole-change.toml"}
    # marked once: a second run records nothing more
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "whole-change",
                          "--release", "0.5.23", "--mark"], catalog_upstream, monkeypatch)
    assert code == 0, err
    assert "not marked" in out and _snapshot(catalog_dir) == after


def test_mark_dry_run_writes_nothing(catalog_dir: Path, catalog_upstream: UpstreamRepo,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    before, head = _snapshot(catalog_dir), _head(catalog_dir)
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", "--release",
                          "0.5.23", "--mark", "--dry-run", "--json"], catalog_upstream, monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    assert data["dry_run"] is True
    assert sorted(m["fix"] for m in data["marked"]) == ["reshaped", "whole-change",
                                                         "wider-context"]
    assert not any(m["marked"] for m in data["marked"])
    assert _snapshot(catalog_dir) == before and _head(catalog_dir) == head


@pytest.mark.parametrize("args, said", [
    # a missing release is fetched from the registry now (issue 23); a bad --repo is refused
    (["--release", "0.5.23", "--mark", "--repo", "no-such-clone"], "is not a git repository"),
    (["no-such-fix", "--release", "0.5.23", "--mark"], "no fix named 'no-such-fix'"),
    (["--release", "latest"], "unsupported SGLang version"),
])
def test_bad_input_exits_2_and_leaves_the_catalog(
        args: list[str], said: str, catalog_dir: Path, catalog_upstream: UpstreamRepo,
        monkeypatch: pytest.MonkeyPatch) -> None:
    before, head = _snapshot(catalog_dir), _head(catalog_dir)
    code, out, err = run(["--catalog", str(catalog_dir), "upstream", "check", *args],
                         catalog_upstream, monkeypatch)
    assert code == EXIT_USAGE, (out, err)
    assert said in err
    assert _snapshot(catalog_dir) == before and _head(catalog_dir) == head


def test_a_fix_to_a_crlf_file_is_found_in_the_release_that_holds_it(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """0.5.23's change to a file with CRLF line ends, as a fix on 0.5.22, was "not contained"
    in 0.5.23 while status found it present on a 0.5.23 tree (a trial): the series was read
    with universal newlines, its hunks' CRs dropped, so they matched no line of the file.
    Read as it is, its reversed hunks apply to 0.5.23."""
    git_dir = Path(three_releases.git_dir)
    path = "python/sglang/multimodal_gen/configs/sample/hunyuan_image3.py"
    old, new = _blob(git_dir, "v0.5.22", path), _blob(git_dir, "v0.5.23", path)
    assert b"\r\n" in new and old != new  # the real release's file, CRLF, changed in 0.5.23
    cat = tmp_path / "catalog"
    (cat / "patches" / "crlf").mkdir(parents=True)
    (cat / "patches" / "crlf" / "0001-crlf.patch").write_bytes(
        diff_files(old, new, path).encode("utf-8", "surrogateescape"))
    text = new_manifest_text("crlf", "a CRLF file's change", "0.5.22", [("0001-crlf.patch", "sglang")],
                             "0.5.23's change to a CRLF file.", date="2026-11-01")
    (cat / "manifests").mkdir()
    (cat / "manifests" / "crlf.toml").write_text(text)
    verdict = contains(Catalog(cat), "crlf", "0.5.23", upstream=three_releases)
    assert verdict.contained, verdict
    assert not contains(Catalog(cat), "crlf", "0.5.22", upstream=three_releases).contained

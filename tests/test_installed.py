"""The shipped fixes on an installed SGLang: the real 0.5.23 wheel pip-installed (no deps) into a
fresh venv, targeted through that venv's interpreter, with the wheel's RECORD as the proof
that the installed files are pristine (docs/design.md, "Automatic preconditions").

The venv is made once per session (installing the wheel takes a while); each test leaves it
as pip installed it: its teardown drops patchkit's state and puts back, from the wheel, every
file of the package that no longer matches RECORD.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.errors import FixLost, PreconditionFailed, TargetError, UsageError
from patchkit.targets import LocalTarget, resolve_target
from patchkit.upstream import download_wheel
from tests.fixtures.sglang import CATALOG_RELEASE

pytestmark = pytest.mark.network  # the 0.5.23 wheel comes from the registry once

REPO = Path(__file__).resolve().parent.parent
SERVE_SCRIPT = REPO / "docs" / "examples" / "serve_dsv4_prefill.sh"
PRODUCTION = ["dsv4-bf16-index-k", "dsv4-bf16-sizing", "prefill-hicache-off"]
POOL = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
CONFIGURATOR = "sglang/srt/model_executor/pool_configurator.py"


def pip_install(python: Path, wheel: Path, *extra: str) -> None:
    """pip installs ``wheel`` into ``python``'s environment (this venv's pip, ``--python``: the
    environment needs no pip of its own, whose install cost more than a test's work)."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-compile", "--no-index", *extra, str(wheel)], check=True,
                   capture_output=True, timeout=600)


def record_hashes(site: Path) -> dict[str, str]:
    """RECORD of the installed sglang: path -> hex sha256 (files listed with a hash only)."""
    out = {}
    with open(site / f"sglang-{CATALOG_RELEASE}.dist-info" / "RECORD", newline="") as fh:
        for row in csv.reader(fh):
            algo, _, digest = row[1].partition("=")
            if algo == "sha256":
                out[row[0]] = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unlike_record(site: Path) -> list[str]:
    """The package files whose bytes differ from RECORD (or are gone)."""
    return [rel for rel, want in record_hashes(site).items() if rel.startswith("sglang/")
            and (not (site / rel).is_file() or sha256(site / rel) != want)]


@pytest.fixture(scope="session")
def installed_venv(tmp_path_factory: pytest.TempPathFactory,
                   sglang_wheel_0523: Path) -> tuple[Path, Path]:
    """(venv, its site-packages) with the real sglang 0.5.23 wheel installed by pip."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip_install(python, sglang_wheel_0523)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    return venv, site


@pytest.fixture
def venv(installed_venv: tuple[Path, Path], sglang_wheel_0523: Path) -> Iterator[Path]:
    """The session's venv, put back as pip installed it after the test."""
    path, site = installed_venv
    assert unlike_record(site) == [] and not (site / ".patchkit").exists()
    yield path
    shutil.rmtree(site / ".patchkit", ignore_errors=True)
    restore_from_wheel(site, sglang_wheel_0523, unlike_record(site))
    assert unlike_record(site) == []


def restore_from_wheel(site: Path, wheel: Path, files: list[str]) -> None:
    """Put ``files`` (package files unlike RECORD) back as pip installed them: the wheel's
    bytes and mode, what ``pip install --force-reinstall`` would write for them (a reinstall
    of all 6,000 files cost seconds per test)."""
    with zipfile.ZipFile(wheel) as zf:
        for rel in files:
            info = zf.getinfo(rel)
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).unlink(missing_ok=True)
            (site / rel).write_bytes(zf.read(info))  # 0o644 by the umask, as pip's
            if (info.external_attr >> 16) & 0o111:  # pip's rule for executables
                (site / rel).chmod(0o755)


@pytest.fixture
def site(installed_venv: tuple[Path, Path]) -> Path:
    return installed_venv[1]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(REPO)


@pytest.fixture
def target(venv: Path, tmp_path: Path) -> LocalTarget:
    serve = tmp_path / "serve"
    serve.mkdir()
    shutil.copy2(SERVE_SCRIPT, serve / SERVE_SCRIPT.name)
    found = resolve_target(f"python:{venv / 'bin' / 'python'}", [f"serve={serve}"])
    assert isinstance(found, LocalTarget)
    return found


# -- 1. RECORD proves the installed files pristine -----------------------------------------


def test_a_file_modified_outside_patchkit_is_refused_by_name(
        catalog: Catalog, target: LocalTarget, site: Path) -> None:
    pool = site / POOL
    pool.write_bytes(pool.read_bytes() + b"# edited by hand\n")
    edited = sha256(pool)
    before = {p: sha256(p) for p in (site / "sglang" / "srt").rglob("*.py")}

    with pytest.raises(PreconditionFailed) as exc:
        api.apply(catalog, target, ["dsv4-bf16-index-k"])
    failed = [f for f in exc.value.details["failures"] if f["kind"] == "record-clean"]
    # named as the file lies in site-packages, not by the patch's python/sglang/... (issue 25, 11)
    assert [f["where"] for f in failed] == [f"sglang:{POOL}"]
    assert "modified outside patchkit" in failed[0]["detail"]
    assert edited in failed[0]["detail"] and record_hashes(site)[POOL] in failed[0]["detail"]
    assert f"sglang {CATALOG_RELEASE}" in failed[0]["detail"]
    # the pip of the venv holding the package, not a bare `pip` (whatever is first on PATH,
    # patchkit's own environment often: a trial)
    assert f"({site.parents[2] / 'bin' / 'python'} -m pip install --force-reinstall" in failed[0]["detail"], \
        failed[0]["detail"]
    # nothing was written: not the edited file, not the other one the fix changes
    assert {p: sha256(p) for p in (site / "sglang" / "srt").rglob("*.py")} == before
    assert not (site / ".patchkit" / "state.json").exists()


def test_the_cli_refuses_the_edited_file_with_exit_1(target: LocalTarget, site: Path,
                                                      venv: Path) -> None:
    pool = site / POOL
    pool.write_bytes(pool.read_bytes().replace(b"class DeepSeekV4IndexerPool", b"class  DeepSeekV4IndexerPool", 1))
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "--catalog", str(REPO), "apply", "dsv4-bf16-index-k",
         "--target", f"python:{venv / 'bin' / 'python'}"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"sglang:{POOL}" in proc.stderr and "modified outside patchkit" in proc.stderr
    assert f"{venv / 'bin' / 'python'} -m pip install --force-reinstall" in proc.stderr, proc.stderr
    assert "python/sglang/" not in proc.stderr


def test_the_dry_run_diff_of_an_installed_package_is_one_git_apply_reads_in_its_root(
        site: Path, venv: Path, tmp_path: Path) -> None:
    """cli.md: `apply --dry-run --diff FIX > change.diff` gives a file `git apply` reads. On an
    installed package the headers named the patch's python/sglang/x.py, where the file lies at
    sglang/x.py, so git apply failed ("No such file or directory")."""
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "--catalog", str(REPO), "apply", "dsv4-bf16-index-k",
         "--dry-run", "--diff", "--target", f"python:{venv / 'bin' / 'python'}"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert f"+++ b/{POOL}" in proc.stdout and "python/sglang/" not in proc.stdout
    (tmp_path / "change.diff").write_text(proc.stdout)  # the whole output, as cli.md says
    check = subprocess.run(["git", "apply", "--check", "--unsafe-paths", str(tmp_path / "change.diff")],
                           cwd=site, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_seed_fixes_apply_to_the_installed_release_verify_and_roll_back_to_record(
        catalog: Catalog, target: LocalTarget, site: Path, venv: Path) -> None:
    python = str(venv / "bin" / "python")
    assert target.python == python and target.roots["sglang"] == str(site)
    record = record_hashes(site)

    result = api.apply(catalog, target, PRODUCTION)
    assert [f.outcome for f in result.fixes] == ["applied"] * 3
    touched = {(f.root, f.path) for fix in result.fixes for f in fix.files}
    assert {p for r, p in touched if r == "sglang"} == {f"python/{POOL}", f"python/{CONFIGURATOR}",
                                                        "python/sglang/srt/environ.py"}
    # what the output names: each file as it lies in site-packages (issue 25, item 11)
    assert {f.where for fix in result.fixes for f in fix.files if f.root == "sglang"} == {
        f"sglang:{POOL}", f"sglang:{CONFIGURATOR}", "sglang:sglang/srt/environ.py"}
    assert not [c.name for fix in result.fixes for c in fix.verification + fix.preconditions
                if "sglang:python/sglang/" in f"{c.name} {c.detail}"]
    for fix in result.fixes:  # the RECORD proof ran for every installed file, and held
        proofs = [c for c in fix.preconditions if c.kind == "record-clean"]
        assert len(proofs) == len([f for f in fix.files if f.root == "sglang"])
        assert all(c.ok and f"RECORD of sglang {CATALOG_RELEASE}" in c.detail for c in proofs)
    assert sha256(site / POOL) != record[POOL]  # the installed files are the patched ones

    # verified with the venv's interpreter: the python-script check runs there
    verified = api.verify(catalog, target, PRODUCTION)
    assert verified.ok and all(c.ok for f in verified.fixes for c in f.verification)
    script = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert script == str(venv)

    # a second fix on a file patchkit already changed is not refused: its state vouches
    api.rollback(catalog, target, ["dsv4-bf16-sizing"])
    again = api.apply(catalog, target, ["dsv4-bf16-sizing"])
    assert again.fixes[0].outcome == "applied"

    api.rollback(catalog, target, list(reversed(PRODUCTION)))
    for _root, path in touched:
        if path.startswith("python/sglang/"):
            rel = path[len("python/"):]
            assert sha256(site / rel) == record[rel], rel
    assert unlike_record(site) == []
    assert (target.roots["serve"] and
            sha256(Path(target.roots["serve"]) / SERVE_SCRIPT.name) == sha256(SERVE_SCRIPT))


def test_drift_on_an_installed_package_names_the_installed_files_everywhere(
        venv: Path, site: Path) -> None:
    """status (plain and --json), verify, apply and rollback name a drifted file as it lies in
    site-packages, never by the patch's python/sglang/... (issue 25, item 11); a venv target is
    said once per run."""
    where = ["--target", str(venv)]
    res = run_cli("apply", "dsv4-bf16-index-k", *where)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("target: ") == 1, res.stderr
    (site / POOL).write_bytes((site / POOL).read_bytes() + b"# edited by hand\n")

    status = run_cli("status", *where)
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith("dsv4-bf16-index-k\t"))
    assert line.split("\t")[4] == f"{POOL} (drifted)", line
    raw = json.loads(run_cli("status", "--json", *where).stdout)
    files = {f["path"]: f for s in raw["status"]["fixes"] for f in s["files"]}
    assert files[f"python/{POOL}"]["where"] == f"sglang:{POOL}"
    outputs = {"status": status.stdout + status.stderr}
    for op in ("verify", "apply", "rollback"):
        res = run_cli(op, "dsv4-bf16-index-k", *where)
        assert f"sglang:{POOL}" in res.stdout + res.stderr, (op, res.stdout, res.stderr)
        assert res.stderr.count("target: ") == 1, (op, res.stderr)
        outputs[op] = res.stdout + res.stderr
    assert {op: "python/sglang/" in text for op, text in outputs.items()} == dict.fromkeys(
        outputs, False), outputs


def test_a_conflict_on_an_installed_package_names_the_installed_file(
        venv: Path, site: Path, tmp_path: Path) -> None:
    """A hunk whose context is not in the file is refused naming sglang:sglang/..., as the
    file lies in site-packages (issue 25, item 11), nothing written."""
    cat = tmp_path / "catalog"
    (cat / "manifests").mkdir(parents=True)
    shutil.copytree(REPO / "patches" / "dsv4-bf16-index-k", cat / "patches" / "off",
                    ignore=shutil.ignore_patterns("0.5.2*"))
    manifest = (REPO / "manifests" / "dsv4-bf16-index-k.toml").read_text()
    (cat / "manifests" / "off.toml").write_text(manifest.split("[[variants]]")[0].replace(
        'name = "dsv4-bf16-index-k"', 'name = "off"', 1))
    patch = next((cat / "patches" / "off").glob("*.patch"))
    patch.write_text(patch.read_text().replace("\n     # for MIN_ROWS", "\n     # for MAX_ROWS", 1))
    res = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(cat), "apply", "off",
                          "--target", str(venv)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=300)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert "error: fix off: sglang:sglang/srt/environ.py: hunk #1 of" in res.stderr, res.stderr
    assert "python/sglang/" not in res.stderr and unlike_record(site) == []


def _write_fix(catalog_dir: Path, name: str, title: str, rationale: str, patch: str) -> None:
    """A version-1 fix ``name`` of one patch (``0001-NAME.patch``) on the catalog's release."""
    (catalog_dir / "patches" / name).mkdir(parents=True)
    (catalog_dir / "patches" / name / f"0001-{name}.patch").write_text(patch)
    (catalog_dir / "manifests").mkdir(parents=True, exist_ok=True)
    (catalog_dir / "manifests" / f"{name}.toml").write_text(f"""format = 1
name = "{name}"
version = 1
title = "{title}"
status = "active"
rationale = "{rationale}"

[upstream]
project = "sglang"
base_release = "{CATALOG_RELEASE}"
releases = ["{CATALOG_RELEASE}"]
root = "sglang"

[[patches]]
file = "0001-{name}.patch"
root = "sglang"
""")


def _version_fix(catalog_dir: Path, site: Path, name: str, top: bool) -> None:
    """A fix ``name`` adding a comment line at the top (or the end) of sglang/version.py."""
    import difflib

    version = (site / "sglang" / "version.py").read_text()
    line = f"# marked by {name}\n"
    changed = line + version if top else version + line
    patch = "".join(difflib.unified_diff(version.splitlines(True), changed.splitlines(True),
                                         "a/python/sglang/version.py", "b/python/sglang/version.py",
                                         n=1))
    _write_fix(catalog_dir, name, "mark version.py", "Marks version.py.", patch)


def test_a_later_fix_on_the_same_installed_file_is_named_as_it_lies(
        venv: Path, site: Path, tmp_path: Path) -> None:
    """Rolling back a fix that a later fix also changed the file of is refused naming the file
    as it lies in site-packages (issue 25, item 11), nothing written."""
    cat = tmp_path / "catalog"
    _version_fix(cat, site, "mark-end", top=False)
    _version_fix(cat, site, "mark-top", top=True)
    where = ["--target", str(venv)]
    base = [sys.executable, "-m", "patchkit", "--catalog", str(cat)]
    for name in ("mark-end", "mark-top"):
        res = subprocess.run([*base, "apply", name, *where], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=300)
        assert res.returncode == 0, res.stderr
    before = (site / "sglang" / "version.py").read_bytes()
    res = subprocess.run([*base, "rollback", "mark-end", *where], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=300)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "fix mark-top was applied after mark-end and also changed sglang:sglang/version.py" \
        in res.stderr, res.stderr
    assert "python/sglang/" not in res.stderr
    assert (site / "sglang" / "version.py").read_bytes() == before
    res = subprocess.run([*base, "rollback", "mark-top", "mark-end", *where], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert res.returncode == 0, res.stderr
    assert unlike_record(site) == []


# -- 2. the wheel reinstalled underneath the fixes -------------------------------------------


def run_cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m patchkit`` as a build step or a shell runs it: its own process, no TTY."""
    return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(REPO),
                           *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, env=env)


class Reinstalled(NamedTuple):
    venv: Path
    site: Path
    target: LocalTarget
    patched: dict[str, str]  # the fixed files' sha256 as the apply wrote them


@pytest.fixture(scope="module")
def reinstalled_once(tmp_path_factory: pytest.TempPathFactory, installed_venv: tuple[Path, Path],
                     sglang_wheel_0523: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the session's venv (``venv/``) and a serve folder (``serve/``) with the three
    production fixes applied, then the wheel reinstalled underneath them by pip
    (``--force-reinstall``): (the directory, the fixed files' hashes as the apply wrote them).
    Made once, with one reinstall; each test has its own copy (``reinstalled``)."""
    base = tmp_path_factory.mktemp("reinstalled")
    shutil.copytree(installed_venv[0], base / "venv", symlinks=True)
    (base / "serve").mkdir()
    shutil.copy2(SERVE_SCRIPT, base / "serve" / SERVE_SCRIPT.name)
    found = _reinstalled(base, {})
    assert api.apply(Catalog(REPO), found.target, PRODUCTION).ok
    patched = {rel: sha256(found.site / rel) for rel in (POOL, CONFIGURATOR)}
    pip_install(found.venv / "bin" / "python", sglang_wheel_0523, "--force-reinstall")
    assert unlike_record(found.site) == []  # pip put the wheel's files back, .patchkit/ stayed
    return base, patched


def _reinstalled(base: Path, patched: dict[str, str]) -> Reinstalled:
    venv = base / "venv"
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    assert site.is_relative_to(venv), site
    found = resolve_target(f"python:{python}", [f"serve={base / 'serve'}"])
    assert isinstance(found, LocalTarget)
    return Reinstalled(venv, site, found, patched)


@pytest.fixture
def reinstalled(reinstalled_once: tuple[Path, dict[str, str]], tmp_path: Path) -> Reinstalled:
    """A copy of :func:`reinstalled_once` of the test's own (its records are root-relative)."""
    base, patched = reinstalled_once
    shutil.copytree(base, tmp_path / "reinstalled", symlinks=True)
    return _reinstalled(tmp_path / "reinstalled", patched)


def test_a_reinstall_underneath_is_lost_not_drifted_and_apply_puts_the_fixes_back(
        catalog: Catalog, reinstalled: Reinstalled, sglang_wheel_0523: Path) -> None:
    venv, site, target, patched = reinstalled
    python = venv / "bin" / "python"
    serve = ["--root", f"serve={target.roots['serve']}"]

    states = {s.name: s for s in api.status(catalog, target).status}
    for name in ("dsv4-bf16-index-k", "dsv4-bf16-sizing"):
        assert states[name].state == "lost", states[name]
        assert states[name].detail.startswith(
            f"sglang {CATALOG_RELEASE} reinstalled; recorded v4 no longer present")
        assert f"patchkit apply {name}" in states[name].detail
    assert states["prefill-hicache-off"].state == "applied"  # the serve script kept its fix

    res = run_cli("status", "--target", f"python:{python}", *serve)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("dsv4-bf16-index-k\t"))
    assert (f"\tlost: sglang {CATALOG_RELEASE} reinstalled; recorded v4 no longer present"
            in line), line
    assert "drifted" not in res.stdout
    assert run_cli("status", "--exit-code", "--target", f"python:{python}", *serve).returncode == 1
    # log says the version the target records of a lost fix, as status does (it said null)
    res = run_cli("log", "--json", "--no-history", "--target", f"python:{python}", *serve)
    assert res.returncode == 0, res.stderr
    applied = {f["name"]: f["applied"] for f in json.loads(res.stdout)["fixes"]}
    assert applied["dsv4-bf16-index-k"]["state"] == "lost"
    assert applied["dsv4-bf16-index-k"]["version"] == 4 and applied["dsv4-bf16-index-k"]["applied_at"]

    # verify fails the lost fixes (their change is not in the files), saying why, as lost:
    # their own checks are not run (they failed, and made it a failed verification)
    with pytest.raises(FixLost) as lost:
        api.verify(catalog, target, ["dsv4-bf16-index-k"])
    assert f"lost: sglang {CATALOG_RELEASE} reinstalled" in str(lost.value)
    assert lost.value.details["lost"] == ["dsv4-bf16-index-k"]
    [checked] = lost.value.details["fixes"]
    # a check of its own kind: "drift" and "files as patchkit wrote them" said an edit (a trial)
    assert [(c["kind"], c["name"]) for c in checked["verification"]] == [
        ("lost", "the fix's change in its files")], checked
    # its files as status says them: put back by the reinstall, not edited (a new-user trial)
    assert checked["drifted"] and {f["state"] for f in checked["drifted"]} == {"reinstalled"}, checked

    res = run_cli("apply", *PRODUCTION, "--target", f"python:{python}", *serve)
    assert res.returncode == 0, res.stderr
    assert (f"  re-applied: was lost: sglang {CATALOG_RELEASE} reinstalled; recorded v4 no longer "
            "present\n") in res.stdout
    again = api.apply(catalog, target, PRODUCTION)  # and now: a no-op, the records are new
    assert {f.name: f.outcome for f in again.fixes} == dict.fromkeys(PRODUCTION, "already-applied")
    pip_install(python, sglang_wheel_0523, "--force-reinstall")
    again = api.apply(catalog, target, PRODUCTION)
    outcomes = {f.name: f.outcome for f in again.fixes}
    assert outcomes == {"dsv4-bf16-index-k": "applied", "dsv4-bf16-sizing": "applied",
                        "prefill-hicache-off": "already-applied"}
    assert {rel: sha256(site / rel) for rel in patched} == patched
    raw = {f["name"]: f for f in again.to_json()["fixes"]}
    assert "reinstalled" in raw["dsv4-bf16-index-k"]["lost"]
    assert again.fixes[0].lost and "reinstalled" in again.fixes[0].lost
    assert "Apply it again" not in again.fixes[0].lost  # it just was
    assert {s.name: s.state for s in api.status(catalog, target).status
            if s.name in PRODUCTION} == dict.fromkeys(PRODUCTION, "applied")
    assert api.verify(catalog, target, PRODUCTION).ok


def _creating_fix(catalog_dir: Path, site: Path) -> str:
    """A catalog with one fix that changes sglang/version.py (RECORD lists it) and creates
    sglang/srt/patchkit_probe.py (no RECORD entry): the name of the fix."""
    import difflib

    catalog_dir.mkdir()
    version = (site / "sglang" / "version.py").read_text()
    changed = version + "# patched by probe-module\n"
    patch = "".join(difflib.unified_diff(version.splitlines(True), changed.splitlines(True),
                                         "a/python/sglang/version.py", "b/python/sglang/version.py"))
    patch += ("diff --git a/python/sglang/srt/patchkit_probe.py b/python/sglang/srt/patchkit_probe.py\n"
              "new file mode 100644\n--- /dev/null\n+++ b/python/sglang/srt/patchkit_probe.py\n"
              "@@ -0,0 +1 @@\n+PROBE = 1\n")
    _write_fix(catalog_dir, "probe-module", "a fix that creates a module",
               "Creates sglang/srt/patchkit_probe.py and marks version.py.", patch)
    return "probe-module"


def test_a_lost_fix_that_created_a_file_is_applied_again_over_what_the_reinstall_left(
        target: LocalTarget, site: Path, venv: Path, sglang_wheel_0523: Path, tmp_path: Path) -> None:
    """pip removes only what RECORD lists: the file the fix created stays, as the fix wrote it;
    applying the lost fix again takes it back and rolls back cleanly afterwards."""
    name = _creating_fix(tmp_path / "catalog", site)
    catalog = Catalog(tmp_path / "catalog")
    probe = site / "sglang" / "srt" / "patchkit_probe.py"
    assert api.apply(catalog, target, [name]).ok and probe.read_text() == "PROBE = 1\n"

    pip_install(venv / "bin" / "python", sglang_wheel_0523, "--force-reinstall")
    assert unlike_record(site) == [] and probe.exists()  # version.py back, the probe left
    [state] = [s for s in api.status(catalog, target).status if s.name == name]
    assert state.state == "lost", state

    again = api.apply(catalog, target, [name])
    assert [(f.name, f.outcome) for f in again.fixes] == [(name, "applied")]
    assert again.fixes[0].lost and probe.read_text() == "PROBE = 1\n"
    assert "# patched by probe-module" in (site / "sglang" / "version.py").read_text()
    assert api.rollback(catalog, target, [name]).ok
    assert not probe.exists() and unlike_record(site) == []  # the created file goes with it


def test_a_lost_fix_rolls_back_to_the_new_install_without_force(
        catalog: Catalog, reinstalled: Reinstalled) -> None:
    _, site, target, _ = reinstalled
    as_installed = {rel: sha256(site / rel) for rel in (POOL, CONFIGURATOR)}

    done = api.rollback(catalog, target, list(reversed(PRODUCTION)))
    assert [f.outcome for f in done.fixes] == ["rolled-back"] * 3
    # the reinstalled files are not the rollback's: no file row (a restart is asked for what
    # a run changed), and the fix says it was forgotten
    lost = [f for f in done.fixes if f.name != "prefill-hicache-off"]
    assert lost and all(not f.files for f in lost), [(f.name, f.files) for f in lost]
    assert all("forgotten" in f.detail for f in lost), [f.detail for f in lost]
    from patchkit import hooks  # what asks for a restart, or undoes after a failed check

    assert hooks.changed_fixes(done) == ["prefill-hicache-off"]
    assert {rel: sha256(site / rel) for rel in as_installed} == as_installed
    assert unlike_record(site) == []
    assert sha256(Path(target.roots["serve"]) / SERVE_SCRIPT.name) == sha256(SERVE_SCRIPT)
    assert {s.name for s in api.status(catalog, target).status
            if s.state not in ("not-applied", "not-needed")} == set()

    # the undo of that rollback puts the lost records back, and says they are lost again:
    # "its record and files put back as they were (v4)" read as the fix in place (a trial)
    undone = {f.name: f.detail or "" for f in api.undo(catalog, target).fixes}
    for name in ("dsv4-bf16-index-k", "dsv4-bf16-sizing"):
        assert "did not hold v4's change then, and do not: lost or drifted" in undone[name], undone
    assert "did not hold" not in undone["prefill-hicache-off"], undone
    assert {s.name: s.state for s in api.status(catalog, target).status if s.name in PRODUCTION} \
        == {"dsv4-bf16-index-k": "lost", "dsv4-bf16-sizing": "lost", "prefill-hicache-off": "applied"}


# -- 3. a container build step -----------------------------------------------------------------


def build_env(tmp_path: Path) -> dict[str, str]:
    """A build step's environment for the patchkit process: no git on PATH, and any network
    attempt sent to a closed port (a build without network)."""
    empty = tmp_path / "bin-without-git"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty), HTTP_PROXY="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", PIP_NO_INDEX="1")
    assert shutil.which("git", path=env["PATH"]) is None
    return env


def test_a_container_build_step_applies_without_git_tty_or_network_and_status_reads_it_back(
        site: Path, venv: Path, tmp_path: Path) -> None:
    python = venv / "bin" / "python"
    fixes = ["dsv4-bf16-index-k", "dsv4-bf16-sizing"]
    touched_dirs = [site / "sglang/srt/mem_cache", site / "sglang/srt/model_executor"]
    subprocess.run([str(python), "-m", "compileall", "-q", *map(str, touched_dirs)], check=True)
    assert all((d / "__pycache__").is_dir() for d in touched_dirs)
    env = build_env(tmp_path)

    res = run_cli("apply", *fixes, "--target", f"python:{python}", "--no-git", "--json", env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    label = out["summary"]
    assert label == {"sglang": CATALOG_RELEASE, "fixes": {"dsv4-bf16-index-k": 4,
                                                          "dsv4-bf16-sizing": 4}}
    assert len(json.dumps(label)) < 200  # small enough for a LABEL value
    kinds = {c["kind"] for f in out["fixes"] for c in f["preconditions"]}
    assert "record-clean" in kinds and "git-clean" not in kinds  # RECORD, not git, vouched
    assert not any((d / "__pycache__").exists() for d in touched_dirs)  # bytecode purged
    assert sha256(site / POOL) != record_hashes(site)[POOL]

    # in the running container: status --json reads the same summary back
    res = run_cli("status", "--target", f"python:{python}", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["summary"] == label
    res = run_cli("verify", *fixes, "--target", f"python:{python}", env=env)
    assert res.returncode == 0, (res.stdout, res.stderr)
    # the build step's other spelling, sync: the shipped catalog's revert fix has nothing to
    # revert in a release wheel, and needs no git to tell (it refused the whole sync)
    res = run_cli("sync", "--target", f"python:{python}", "--no-git", "--json", env=env)
    assert res.returncode == 0, res.stderr
    outcomes = {f["name"]: (f["outcome"], f.get("detail")) for f in json.loads(res.stdout)["fixes"]}
    assert outcomes["revert-hicache-index-k-sync"][0] == "not-needed", outcomes
    assert "--no-git" in outcomes["revert-hicache-index-k-sync"][1]
    assert {outcomes[f][0] for f in fixes} == {"already-applied"}


def test_no_git_on_a_git_checkout_says_the_clean_check_was_not_run(
        catalog: Catalog, catalog_tree: Path, tmp_path: Path) -> None:
    """--no-git on a checkout: no git runs, and the apply says what that leaves unproven."""
    target = LocalTarget(roots={"sglang": str(catalog_tree)}, description="checkout")
    result = api.apply(catalog, target, ["dsv4-bf16-index-k"], git=False)
    checks = [c for c in result.fixes[0].preconditions if c.kind == "git-clean"]
    assert checks and all(c.ok and c.detail.startswith("not checked: --no-git") for c in checks)
    with pytest.raises(UsageError):
        api.apply(catalog, target, ["dsv4-bf16-sizing"], git=False, commit=True)


def test_an_installed_package_inside_a_git_work_tree_is_proved_by_its_record_not_git(
        catalog: Catalog, target: LocalTarget, venv: Path, site: Path) -> None:
    """A virtualenv inside a project's repository (not ignored there): the apply was refused,
    its files "untracked in the git work tree", with advice to commit site-packages files (a
    trial). The wheel's RECORD is an installed package's proof: the git check is not run,
    and says why."""
    subprocess.run(["git", "init", "-q", str(venv)], check=True)
    try:
        result = api.apply(catalog, target, ["dsv4-bf16-index-k"])
        assert [f.outcome for f in result.fixes] == ["applied"]
        clean = [c for c in result.fixes[0].preconditions if c.kind == "git-clean"]
        assert clean and all(c.ok and c.detail == "not checked: an installed package: its files "
                             "are checked against its wheel's RECORD, not against the git work "
                             "tree it lies in" for c in clean), clean
        assert any(c.kind == "record-clean" and c.ok for c in result.fixes[0].preconditions)
        assert api.rollback(catalog, target, ["dsv4-bf16-index-k"]).ok
    finally:
        shutil.rmtree(venv / ".git")


# -- the same over SSH: RECORD is read by the engine on the host ------------------------------


@pytest.mark.ssh
def test_the_record_proof_runs_on_the_host_of_a_remote_target(
        catalog: Catalog, site: Path, venv: Path, sshd: Any, tmp_path: Path) -> None:
    from patchkit.targets.remote import RemoteTarget
    from tests.test_remote import Ssh

    target = RemoteTarget(Ssh(sshd, tmp_path).spec(), {"sglang": str(site)},
                          str(venv / "bin" / "python"))
    applied = api.apply(catalog, target, ["dsv4-bf16-index-k"])
    proofs = [c for c in applied.fixes[0].preconditions if c.kind == "record-clean"]
    assert proofs and all(c.ok and "RECORD of sglang" in c.detail for c in proofs)
    assert applied.to_json()["summary"] == {"sglang": CATALOG_RELEASE,
                                            "fixes": {"dsv4-bf16-index-k": 4}}

    configurator = site / CONFIGURATOR
    configurator.write_bytes(configurator.read_bytes() + b"# edited on the host\n")
    with pytest.raises(PreconditionFailed) as exc:
        api.apply(catalog, target, ["dsv4-bf16-sizing"])
    failed = [f for f in exc.value.details["failures"] if f["kind"] == "record-clean"]
    assert [f["where"] for f in failed] == [f"sglang:{CONFIGURATOR}"]
    assert "modified outside patchkit" in failed[0]["detail"]


def test_a_remote_python_target_finds_its_sglang_on_the_host(
        catalog: Catalog, site: Path, venv: Path, sshd: Any, tmp_path: Path) -> None:
    """ssh://host/python:/venv/bin/python: the host's interpreter says where its sglang is,
    and the fixes' checks run with it (issue 17, item 2)."""
    from patchkit.targets.remote import RemoteTarget, parse_ssh_url
    from tests.test_remote import Ssh

    python = str(venv / "bin" / "python")
    spec, root = parse_ssh_url(f"ssh://{sshd.user}@127.0.0.1:{sshd.port}/python:{python}")
    assert root == f"python:{python}"
    target = RemoteTarget(Ssh(sshd, tmp_path).spec(), {"sglang": root})
    assert f"/python:{python}" in target.status_command
    applied = api.apply(catalog, target, ["dsv4-bf16-index-k"])
    assert applied.to_json()["summary"]["fixes"] == {"dsv4-bf16-index-k": 4}
    assert applied.fixes[0].outcome == "applied"
    assert (site / ".patchkit" / "state.json").is_file()  # the state root is the resolved site
    missing = RemoteTarget(Ssh(sshd, tmp_path).spec(), {"sglang": f"python:{tmp_path}/no/python"})
    with pytest.raises(TargetError, match="does not exist"):
        api.status(catalog, missing)
    api.rollback(catalog, target, ["dsv4-bf16-index-k"])


def test_a_fix_requiring_a_lost_fix_says_the_dependency_is_lost(
        catalog: Catalog, reinstalled: Reinstalled) -> None:
    """After a reinstall took both away, applying the dependent fix alone is refused: its
    dependency is recorded but lost (it said "neither recorded by patchkit nor present")."""
    with pytest.raises(PreconditionFailed) as refused:
        api.apply(catalog, reinstalled.target, ["dsv4-bf16-sizing"])
    said = str(refused.value)
    assert "dsv4-bf16-index-k is recorded but lost" in said, said
    assert "neither recorded" not in said
    assert "patchkit apply dsv4-bf16-index-k" in said


def test_a_file_put_back_by_hand_is_drift_not_a_reinstall(
        catalog: Catalog, target: LocalTarget, site: Path) -> None:
    """One of a fix's files restored to the wheel's bytes by hand holds what RECORD lists, as
    after a reinstall; but pip rewrites RECORD on every install, and it is untouched: the fix
    is drifted (it said "sglang 0.5.23 reinstalled"). After a real reinstall it is lost
    (``reinstalled``, above)."""
    environ = site / "sglang" / "srt" / "environ.py"
    original = environ.read_bytes()
    assert api.apply(catalog, target, ["dsv4-bf16-index-k"]).ok
    environ.write_bytes(original)
    [seen] = [s for s in api.status(catalog, target).status if s.name == "dsv4-bf16-index-k"]
    assert seen.state == "drifted", seen


def test_a_fix_recorded_on_a_root_not_given_stops_nothing_on_the_roots_given(
        catalog: Catalog, target: LocalTarget, venv: Path) -> None:
    """An installed package that records the serve script's fix (root ``serve``): a run given
    the sglang root alone leaves that fix out, as ``status`` does, instead of failing every
    command with "root 'serve' is not one of the target's roots" (the look for fixes lost to
    a reinstall read every recorded fix's files; a fleet trial). Only an undo of the change
    that wrote on ``serve`` is refused, naming the root, since it would be half an undo."""
    assert api.apply(catalog, target, ["prefill-hicache-off"]).ok
    alone = ["--target", f"python:{venv / 'bin' / 'python'}"]
    for args, said in ((["sync", "--dry-run"], "prefill-hicache-off: applied here, not synced: root serve not given"),
                       (["apply", "dsv4-bf16-index-k", "--dry-run"], "would-apply dsv4-bf16-index-k"),
                       (["verify"], "prefill-hicache-off: applied here, not verified"),
                       (["status", "--exit-code"], "prefill-hicache-off: applied here, not looked at")):
        res = run_cli(*args, *alone)
        assert res.returncode == 0 and said in res.stdout + res.stderr, (args, res.stdout, res.stderr)
    res = run_cli("undo", "--dry-run", *alone)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "it wrote files on root serve, which this run was not given" in res.stderr, res.stderr
    assert "Give --root serve=PATH" in res.stderr


# -- 3. an upgrade with pip install --target leaves the old dist-info behind ------------------


def pip_target(site: Path, wheel: Path, *extra: str) -> None:
    """``pip install --no-deps --target site wheel``: a container build's install, which on an
    upgrade (``--upgrade``) replaces the package but keeps the old release's dist-info."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--no-index", "--target", str(site), *extra, str(wheel)], check=True,
                   capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def upgraded_once(tmp_path_factory: pytest.TempPathFactory, sglang_wheels: Path,
                  sglang_wheel_0523: Path) -> Path:
    """A --target install of sglang 0.5.22 with dsv4-bf16-index-k applied (its 0.5.22 variant,
    v3), then upgraded to 0.5.23 with pip install --upgrade --target: both dist-infos stay.
    Made once (two pip installs); each test has its own copy (``upgraded``)."""
    site = tmp_path_factory.mktemp("upgraded") / "site"
    pip_target(site, download_wheel("0.5.22", sglang_wheels))
    res = run_cli("apply", "dsv4-bf16-index-k", "--target", site)
    assert res.returncode == 0, res.stdout + res.stderr
    pip_target(site, sglang_wheel_0523, "--upgrade")
    assert {p.name for p in site.glob("sglang-*.dist-info")} == {
        "sglang-0.5.22.dist-info", f"sglang-{CATALOG_RELEASE}.dist-info"}
    return site


@pytest.fixture
def upgraded(tmp_path: Path, upgraded_once: Path) -> Path:
    """A copy of :func:`upgraded_once` of the test's own (its records are root-relative)."""
    site = tmp_path / "site"
    shutil.copytree(upgraded_once, site, symlinks=True)
    return site


def test_a_stale_dist_info_left_by_an_upgrade_keeps_the_record_check(upgraded: Path) -> None:
    """The dist-info whose version the package's own version file says is the install: status
    names it, the fix applied on 0.5.22 is lost to a reinstall (not "the checkout moved"), and
    a file edited by hand is refused by its RECORD. Two dist-infos made the target a plain
    directory: no installed release, no RECORD check (a new-user trial)."""
    res = run_cli("status", "--json", "--target", upgraded)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    assert seen["installed"] == {"sglang": {"dist": "sglang", "version": CATALOG_RELEASE}}
    [fix] = [f for f in seen["status"]["fixes"] if f["name"] == "dsv4-bf16-index-k"]
    assert fix["state"] == "lost", fix
    assert fix["detail"].startswith(
        f"sglang 0.5.22 -> {CATALOG_RELEASE} reinstalled; recorded v3 no longer present"), fix

    pool = upgraded / POOL
    pool.write_bytes(pool.read_bytes() + b"# edited by hand\n")
    res = run_cli("apply", "dsv4-bf16-index-k", "--dry-run", "--target", upgraded)
    assert res.returncode == 1, res.stdout + res.stderr
    said = " ".join(res.stderr.split())
    assert f"sglang:{POOL}" in said and "was modified outside patchkit" in said, said
    assert f"the RECORD of sglang {CATALOG_RELEASE} (" in said, said


def test_two_dist_infos_the_version_file_does_not_settle_are_refused_naming_both(
        upgraded: Path) -> None:
    """When the package's version file names neither install, nothing says which RECORD is
    the proof: every command that reads it refuses, naming both directories and what to do,
    instead of dropping the check."""
    own = upgraded / "sglang" / "_version.py"
    own.write_text(own.read_text().replace(f"'{CATALOG_RELEASE}'", "'0.5.24'"))
    for args in (["status"], ["apply", "dsv4-bf16-index-k", "--dry-run"]):
        res = run_cli(*args, "--target", upgraded)
        assert res.returncode == 5, (args, res.stdout, res.stderr)
        said = " ".join(res.stderr.split())
        for name in ("sglang-0.5.22.dist-info", f"sglang-{CATALOG_RELEASE}.dist-info"):
            assert str(upgraded / name) in said, said
        assert "says 0.5.24" in said and "Remove the stale one" in said, said


def _built_from_the_fork(site: Path, rel: str) -> None:
    """RECORD as a wheel built from a fork that committed the file as it is now says it."""
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    path = site / f"sglang-{CATALOG_RELEASE}.dist-info" / "RECORD"
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    rows = [[r[0], f"sha256={digest}", str(len(data))] if r and r[0] == rel else r for r in rows]
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)


def test_a_revert_fix_on_an_installed_package_inside_a_git_work_tree_applies_its_series(
        catalog: Catalog, target: LocalTarget, venv: Path, site: Path) -> None:
    """A virtualenv inside a project's repository (the project ignores it), its sglang built
    from a fork that committed the dead fix: the revert fix was asked of that repository's
    history, which never held SGLang's commits, and refused ("no commit in the history of
    HEAD ... carries the change"), with --no-git refused too: no way to apply it (a trial).
    An installed package has no checkout, whatever work tree it lies in: the revert
    reverse-applies its series there, as outside git. Where patchkit itself applied the dead
    fix, the revert is refused, naming the rollback that puts it back with its record (a
    trial's revert left the dead fix recorded as applied, and verify failing for good)."""
    subprocess.run(["git", "init", "-q", str(venv)], check=True)
    (venv / ".gitignore").write_text("lib/\n")
    subprocess.run(["git", "-C", str(venv), "add", ".gitignore"], check=True)
    subprocess.run(["git", "-C", str(venv), "-c", "user.name=A", "-c", "user.email=a@example.org",
                    "commit", "-qm", "a project"], check=True)
    rel = "sglang/srt/mem_cache/memory_pool_host.py"
    record_file = site / f"sglang-{CATALOG_RELEASE}.dist-info" / "RECORD"
    as_installed = record_file.read_bytes()
    try:
        api.apply(catalog, target, ["dsv4-bf16-index-k"])
        api.apply(catalog, target, ["hicache-index-k-sync"], allow_inactive=True)
        with pytest.raises(PreconditionFailed, match="roll it back instead") as refused:
            api.apply(catalog, target, ["revert-hicache-index-k-sync"])
        assert "patchkit rollback hicache-index-k-sync" in refused.value.message
        # the fork's build instead: its wheel carries the dead fix, which patchkit never applied
        state_file = site / ".patchkit" / "state.json"
        state = json.loads(state_file.read_text())
        state["fixes"] = [f for f in state["fixes"] if f["name"] != "hicache-index-k-sync"]
        state_file.write_text(json.dumps(state))
        _built_from_the_fork(site, rel)
        assert "HICACHE_DBG" in (site / rel).read_text()
        result = api.apply(catalog, target, ["revert-hicache-index-k-sync"])
        assert [f.outcome for f in result.fixes] == ["applied"], result.fixes
        said = [c for c in result.fixes[0].preconditions if c.kind == "git-revert"]
        assert said and said[0].ok and "is an installed package" in said[0].detail, said
        assert "HICACHE_DBG" not in (site / rel).read_text()
        status = {s.name: s.state for s in api.status(catalog, target).status}
        assert status["revert-hicache-index-k-sync"] == "applied", status
        api.rollback(catalog, target, ["revert-hicache-index-k-sync"])
        api.rollback(catalog, target, ["dsv4-bf16-index-k"])
    finally:
        shutil.rmtree(venv / ".git")
        (venv / ".gitignore").unlink()
        record_file.write_bytes(as_installed)

def test_commit_is_refused_on_an_installed_package_whatever_work_tree_it_lies_in(
        catalog: Catalog, target: LocalTarget, venv: Path, site: Path) -> None:
    """`apply --commit` on a venv inside a project's repository committed the one changed
    site-packages file to that project (a trial). An installed package has no checkout of its
    own: --commit is refused, writing nothing, and the apply without it works."""
    subprocess.run(["git", "init", "-q", str(venv)], check=True)
    subprocess.run(["git", "-C", str(venv), "-c", "user.name=A", "-c", "user.email=a@example.org",
                    "commit", "-q", "--allow-empty", "-m", "a project"], check=True)
    try:
        with pytest.raises(UsageError, match="is an installed package") as refused:
            api.apply(catalog, target, ["dsv4-bf16-index-k"], commit=True)
        assert "Apply without --commit" in refused.value.message
        assert unlike_record(site) == [] and not (site / ".patchkit" / "state.json").exists()
        log = subprocess.run(["git", "-C", str(venv), "log", "--format=%s"], check=True,
                             capture_output=True, text=True).stdout.split("\n")
        assert log[0] == "a project"
        assert api.apply(catalog, target, ["dsv4-bf16-index-k"]).ok
        api.rollback(catalog, target, ["dsv4-bf16-index-k"])
    finally:
        shutil.rmtree(venv / ".git")

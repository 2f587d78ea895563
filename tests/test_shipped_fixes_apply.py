"""Every shipped fix applies to a real tree of its release (0.5.23) and passes its checks.

Manifests are read with tomllib directly, and the checks are evaluated here with plain
tools (git apply, patch -F0, grep semantics, ast, bash -n, the shipped scripts), so the
catalog stays honest independently of patchkit's own engine.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.sglang import CATALOG_RELEASE, SGLANG_VERSION

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "manifests"
PATCHES = REPO / "patches"
SERVE_SCRIPT = REPO / "docs" / "examples" / "serve_dsv4_prefill.sh"

pytestmark = pytest.mark.network  # the 0.5.23 tree comes from the registry once


def load_fixes() -> dict[str, dict[str, Any]]:
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted(MANIFESTS.glob("*.toml"))}


def application_order(fixes: dict[str, dict[str, Any]]) -> list[str]:
    """Dependencies (and a reverted fix) first; ties by first changelog date, then name."""
    def after(name: str) -> set[str]:
        fix = fixes[name]
        return set(fix.get("depends_on", [])) | ({fix["reverts"]} if fix.get("reverts") else set())

    def key(name: str) -> tuple[str, str]:
        return (fixes[name].get("changelog", [{}])[0].get("date", ""), name)

    order: list[str] = []
    while len(order) < len(fixes):
        ready = [n for n in fixes if n not in order and after(n) <= set(order)]
        assert ready, f"dependency cycle among {sorted(set(fixes) - set(order))}"
        order.append(min(ready, key=key))
    return order


def roots_for(sglang: Path, tmp_path: Path) -> dict[str, Path]:
    serve = tmp_path / "serve"
    serve.mkdir()
    shutil.copy2(SERVE_SCRIPT, serve / SERVE_SCRIPT.name)
    return {"sglang": sglang, "serve": serve}


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def check_ok(check: dict[str, Any], roots: dict[str, Path], fix: str) -> tuple[bool, str]:
    kind = check["kind"]
    if kind == "python-script":
        source = (PATCHES / fix / check["script"]).read_text()
        args = [a.replace("{python}", sys.executable) for a in check.get("args", [])]
        for name, path in roots.items():
            args = [a.replace(f"{{root:{name}}}", str(path)) for a in args]
        proc = run([sys.executable, "-c", source, *args], roots[check.get("root", "sglang")])
        return proc.returncode == 0, proc.stdout + proc.stderr
    path = roots[check["root"]] / check["path"]
    if kind == "grep":
        assert not check.get("regex"), "literal patterns only in the shipped fixes"
        hits = sum(check["pattern"] in line for line in path.read_text().split("\n"))
        if "count" in check:
            return hits == check["count"], f"{hits} matching lines, want {check['count']}"
        return (hits > 0) == check["present"], f"{hits} matching lines"
    if kind == "python-syntax":
        try:
            ast.parse(path.read_text())
        except SyntaxError as exc:
            return False, str(exc)
        return True, ""
    if kind == "bash-syntax":
        proc = run(["bash", "-n", str(path)], path.parent)
        return proc.returncode == 0, proc.stderr
    raise AssertionError(f"{fix}: check kind {kind} not covered by this test")


def test_manifests_match_their_series_files() -> None:
    fixes = load_fixes()
    assert set(fixes) == {
        "dsv4-bf16-index-k", "dsv4-bf16-sizing", "hicache-index-k-sync",
        "revert-hicache-index-k-sync", "prefill-hicache-off"}
    for name, fix in fixes.items():
        assert fix["format"] == 1 and fix["name"] == name
        if fix["upstream"].get("releases", [fix["upstream"]["base_release"]]):
            # Every SGLang series was rebased onto the catalog's release; 0.5.21 is history.
            assert fix["upstream"]["base_release"] == CATALOG_RELEASE, name
            assert fix["upstream"]["releases"] == [CATALOG_RELEASE], name
        else:  # the serve-script fix: no release precondition, written with 0.5.21
            assert fix["upstream"]["base_release"] == SGLANG_VERSION, name
        for ref in fix["patches"]:
            patch = PATCHES / name / ref["file"]
            assert patch.is_file(), patch
            assert patch.read_text().startswith("From "), f"{patch}: no From/Subject header"
        for check in fix.get("verification", []):
            if check["kind"] == "python-script":
                assert (PATCHES / name / check["script"]).is_file()
    assert fixes["hicache-index-k-sync"]["status"] == "dead"
    assert fixes["revert-hicache-index-k-sync"]["reverts"] == "hicache-index-k-sync"
    assert application_order(fixes) == [
        "dsv4-bf16-index-k", "hicache-index-k-sync", "revert-hicache-index-k-sync",
        "dsv4-bf16-sizing", "prefill-hicache-off"]  # the lineage of the seed


def test_every_active_fix_that_changes_what_the_server_runs_names_its_restart() -> None:
    """A fix whose series changes a file the server loads (a Python module, a serve script)
    names the restart it needs, so ``apply`` says it and ``--restart`` runs it: the shipped
    dsv4-bf16-index-k named none (a new-user trial)."""
    for name, fix in load_fixes().items():
        files = [line[6:] for ref in fix["patches"]
                 for line in (PATCHES / name / ref["file"]).read_text().splitlines()
                 if line.startswith("+++ b/")]
        if fix["status"] == "active" and any(f.endswith((".py", ".sh")) for f in files):
            assert fix.get("restart"), f"{name} changes {files} but names no restart"


def test_every_series_applies_with_zero_fuzz_in_order(catalog_tree: Path,
                                                      tmp_path: Path) -> None:
    fixes = load_fixes()
    roots = roots_for(catalog_tree, tmp_path)
    for name in application_order(fixes):
        fix = fixes[name]
        for check in fix.get("preconditions", []):
            ok, detail = check_ok(check, roots, name)
            assert ok, f"{name}: precondition {check.get('name') or check['pattern']}: {detail}"
        for ref in fix["patches"]:
            patch = PATCHES / name / ref["file"]
            root = roots[ref["root"]]
            dry = run(["patch", "-p1", "--dry-run", "-F0", "-N", "-i", str(patch)], root)
            assert dry.returncode == 0 and "fuzz" not in dry.stdout and "offset" not in \
                dry.stdout, f"{name}: patch -F0: {dry.stdout}{dry.stderr}"
            # git apply works in a directory that is no git repository too.
            check = run(["git", "apply", "--check", "-v", str(patch)], root)
            assert check.returncode == 0, f"{name}: git apply --check: {check.stderr}"
            applied = run(["git", "apply", str(patch)], root)
            assert applied.returncode == 0, applied.stderr
        for check in fix.get("verification", []):
            ok, detail = check_ok(check, roots, name)
            assert ok, f"{name}: verification {check['kind']} {check.get('name', '')}: {detail}"
    host = catalog_tree / "python/sglang/srt/mem_cache/memory_pool_host.py"
    assert run(["git", "diff", "--quiet", "HEAD", "--", str(host)], catalog_tree).returncode == 0


def test_python_script_checks_pass_patched_and_fail_unpatched(catalog_tree: Path,
                                                              tmp_path: Path) -> None:
    fixes = load_fixes()
    scripts = [(n, c) for n, f in fixes.items() for c in f.get("verification", [])
               if c["kind"] == "python-script"]
    assert scripts, "the sizing fix ships a python-script check"
    roots = roots_for(catalog_tree, tmp_path)
    for name, check in scripts:
        ok, detail = check_ok(check, roots, name)
        assert not ok and "FAIL:" in detail, f"{name}: check passes on an unpatched tree"
    for name in application_order(fixes):
        for ref in fixes[name]["patches"]:
            proc = run(["git", "apply", str(PATCHES / name / ref["file"])], roots[ref["root"]])
            assert proc.returncode == 0, proc.stderr
    for name, check in scripts:
        ok, detail = check_ok(check, roots, name)
        assert ok, f"{name}: {detail}"
        assert "64.0 (bf16)" in detail


def test_sizing_check_fails_when_only_the_bf16_switch_is_applied(catalog_tree: Path,
                                                                  tmp_path: Path) -> None:
    """The bug the sizing fix closes: bf16 index-K on, configurator still pricing fp8."""
    fixes = load_fixes()
    roots = roots_for(catalog_tree, tmp_path)
    for ref in fixes["dsv4-bf16-index-k"]["patches"]:
        assert run(["git", "apply", str(PATCHES / "dsv4-bf16-index-k" / ref["file"])],
                   catalog_tree).returncode == 0
    check = next(c for c in fixes["dsv4-bf16-sizing"]["verification"]
                 if c["kind"] == "python-script")
    ok, detail = check_ok(check, roots, "dsv4-bf16-sizing")
    assert not ok and "still priced at the fp8 size" in detail


def test_revert_fix_is_not_needed_on_a_pristine_release(catalog_tree: Path) -> None:
    """The revert's change is in a pristine release's files (it removes what the dead fix
    added), but nothing there is to revert: ``not-needed``, not ``present-unrecorded``. Once
    the dead fix is committed and then reverted by hand with git, it is present-unrecorded."""
    from patchkit import api
    from patchkit.catalog import Catalog
    from patchkit.targets import LocalTarget

    catalog, target = Catalog(REPO), LocalTarget({"sglang": str(catalog_tree)}, sys.executable, "local")

    def state() -> str:
        found = {s.name: s.state for s in api.status(catalog, target).status}
        return found["revert-hicache-index-k-sync"]

    assert state() == "not-needed"
    api.apply(catalog, target, ["hicache-index-k-sync"], with_deps=True, allow_inactive=True,
              commit=True)
    assert state() == "not-applied"  # the dead change is there: the revert is needed
    api.rollback(catalog, target, ["hicache-index-k-sync"])  # a revert commit, by git
    assert state() == "present-unrecorded"  # reverted outside this fix: in git's history

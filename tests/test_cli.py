"""The command line's wiring: options reach the library, results and errors reach the user.

Behaviour (hunk placement, the transaction, recovery) is tested through the library and the
engine; here every case goes through ``patchkit.cli.main``: ``CliRunner`` for output, the real
``main()`` (in-process, and as ``python -m patchkit``) for the exit codes of the error boundary.
The target is a real git checkout of the sample tree in ``tests/samples/tree``; after every
failure it must be byte-identical (every file's bytes and mode, ``.git`` included) with no
``.patchkit/`` created.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from click.testing import CliRunner

from tests.engine.helpers import lock_held_elsewhere

import patchkit
from patchkit import api
from patchkit.cli.main import cli, main
from patchkit.errors import (
    EXIT_CHECK_FAILED,
    EXIT_CONFLICT,
    EXIT_INTERNAL,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_PERMISSION,
    EXIT_TARGET,
    EXIT_USAGE,
)

SAMPLES = Path(__file__).parent / "samples"
POOL = "python/sglang/srt/pool.py"
INDEX_K = "index-k-bytes"
POOL_PATCH = f"patches/{INDEX_K}/0001-count-index-k-bytes.patch"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@dataclass
class Env:
    tmp: Path
    catalog: Path
    sglang: Path
    serve: Path

    def commit(self, message: str) -> None:
        git(self.sglang, "add", "-A")
        git(self.sglang, "commit", "-q", "-m", message)


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """The sample catalog and a git checkout of the sample tree at release 0.5.21."""
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    sglang = tmp_path / "sglang"
    shutil.copytree(SAMPLES / "tree" / "sglang", sglang)
    (sglang / "python/sglang/version.py").unlink()
    (sglang / "python/sglang/_version.py").write_text("__version__ = version = '0.5.21'\n")
    serve = tmp_path / "serve"
    shutil.copytree(SAMPLES / "tree" / "serve", serve)
    git(sglang, "init", "-q")
    e = Env(tmp_path, catalog, sglang, serve)
    e.commit("SGLang 0.5.21")
    for var in ("PATCHKIT_CATALOG", "PATCHKIT_CONFIG", "PATCHKIT_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "250")  # rich's width when not on a terminal; keeps lines whole
    monkeypatch.chdir(tmp_path)  # no patchkit.toml here
    return e


@pytest.fixture
def pk(env: Env, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run the real ``main()`` in-process: the exit code is the one the shell would see."""

    def run(*args: Any, catalog: bool = True) -> Run:
        argv = (["--catalog", str(env.catalog)] if catalog else []) + [str(a) for a in args]
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(argv)
        out, err = capsys.readouterr()
        return Run(int(exc.value.code or 0), out, err)

    return run


def invoke(env: Env, *args: Any) -> Any:
    """``CliRunner`` on the click group: the wiring without the exit-code boundary."""
    result = CliRunner().invoke(cli, ["--catalog", str(env.catalog), *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def pk_subprocess(env: Env, *args: Any, columns: int = 250) -> Run:
    """``python -m patchkit``: the installed entry point, in a process of its own."""
    proc = subprocess.run(
        [sys.executable, "-m", "patchkit", "--catalog", str(env.catalog), *map(str, args)],
        capture_output=True, text=True, cwd=env.tmp, timeout=120,
        env=dict(os.environ, COLUMNS=str(columns)),
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def snapshot(*roots: Path) -> dict[str, Any]:
    """Every path under the roots (``.git`` and ``.patchkit`` included): type, mode, bytes."""
    out: dict[str, Any] = {}
    for root in roots:
        out[str(root)] = ("dir", os.lstat(root).st_mode)
        for dirpath, dirs, files in os.walk(root):
            for name in dirs + files:
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    out[p] = ("link", os.readlink(p))
                elif stat.S_ISDIR(st.st_mode):
                    out[p] = ("dir", st.st_mode)
                else:
                    out[p] = ("file", st.st_mode, Path(p).read_bytes())
    return out


def unchanged(env: Env, before: dict[str, Any], *extra: Path) -> None:
    assert snapshot(env.sglang, env.serve, *extra) == before
    assert not (env.sglang / ".patchkit").exists()
    assert not (env.serve / ".patchkit").exists()


def tgt(env: Env) -> list[str]:
    return ["--target", str(env.sglang)]


def write_patch(env: Env, fix: str, text: str) -> None:
    (env.catalog / "patches" / fix / "0001-count-index-k-bytes.patch").write_text(text)


def one_file_patch(path: str, old: str = "    index_k = head_dim\n",
                   new: str = "    index_k = head_dim * 2\n") -> str:
    return (
        f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,1 @@\n-{old}+{new}"
    )


# -- reading the catalog ---------------------------------------------------------------------


def test_version_from_the_entry_point(env: Env) -> None:
    run = pk_subprocess(env, "--version")
    assert run.code == EXIT_OK
    assert run.out.strip() == f"patchkit, version {patchkit.__version__}"


def test_list_shows_active_fixes_and_all_with_json(env: Env) -> None:
    active = invoke(env, "list")
    assert active.exit_code == 0
    assert INDEX_K in active.output and "pool-guard" in active.output
    assert "old-index-k" not in active.output

    everything = invoke(env, "list", "--all")
    assert "old-index-k" in everything.output and "superseded" in everything.output

    data = json.loads(invoke(env, "list", "--all", "--json").output)
    by_name = {f["name"]: f for f in data}
    assert set(by_name) == {INDEX_K, "pool-guard", "old-index-k"}
    assert by_name[INDEX_K]["version"] == 2 and by_name[INDEX_K]["base_release"] == "0.5.21"
    assert by_name["pool-guard"]["depends_on"] == [INDEX_K]
    assert by_name["old-index-k"]["status"] == "superseded"
    assert [f["name"] for f in json.loads(invoke(env, "list", "--json").output)] == [INDEX_K, "pool-guard"]


def test_show_reads_like_a_commit_message_and_as_json(env: Env) -> None:
    human = invoke(env, "show", INDEX_K)
    assert human.exit_code == 0
    lines = human.output.splitlines()
    assert lines[0] == "Count the bf16 index-K cache at two bytes per element"
    assert "the pool over-committed memory" in human.output
    assert "Fix: index-k-bytes v2" in lines
    assert "Applies-to: 0.5.20, 0.5.21" in lines
    assert f"Patch: 0001-count-index-k-bytes.patch [sglang] {POOL}" in lines

    data = json.loads(invoke(env, "show", "pool-guard", "--json").output)
    assert data["name"] == "pool-guard" and data["depends_on"] == [INDEX_K]
    assert data["files"] == {
        "0001-refuse-zero-per-token.patch": [POOL],
        "0002-serve-pin-index-k-dtype.patch": ["serve.sh"],
    }


def test_unknown_fix_is_a_usage_error_naming_close_names(env: Env, pk: Callable[..., Run]) -> None:
    shown = pk("show", "index-k-byte")
    assert shown.code == EXIT_USAGE
    assert "index-k-byte" in shown.err and INDEX_K in shown.err

    before = snapshot(env.sglang, env.serve)
    applied = pk_subprocess(env, "apply", "index-k-bites", *tgt(env))
    assert applied.code == EXIT_USAGE
    assert INDEX_K in applied.err and "Traceback" not in applied.err
    unchanged(env, before)


# -- apply, status, verify, rollback ---------------------------------------------------------


def test_apply_status_rollback_round_trip_leaves_git_clean(env: Env, pk: Callable[..., Run]) -> None:
    original = (env.sglang / POOL).read_bytes()
    applied = pk("apply", INDEX_K, *tgt(env))
    assert applied.code == EXIT_OK, applied.err
    assert "applied index-k-bytes v2" in applied.out
    assert b"index_k = head_dim * 2" in (env.sglang / POOL).read_bytes()
    assert git(env.sglang, "status", "--porcelain") == f" M {POOL}\n"

    status = pk("status", *tgt(env))
    assert status.code == EXIT_OK
    row = next(line for line in status.out.splitlines() if INDEX_K in line)
    assert "applied" in row and "v2" in row

    def states(*roots: str) -> dict[str, str]:
        data = pk("status", "--all", "--json", *tgt(env), *roots).json()
        return {s["name"]: s["state"] for s in data["status"]["fixes"]}

    # pool-guard patches the serve root, which this target does not have: it is not looked for
    assert states() == {INDEX_K: "applied", "old-index-k": "not-applied"}
    assert states("--root", f"serve={env.serve}")["pool-guard"] == "not-applied"

    rolled = pk("rollback", INDEX_K, *tgt(env))
    assert rolled.code == EXIT_OK, rolled.err
    assert "rolled-back index-k-bytes v2" in rolled.out
    assert (env.sglang / POOL).read_bytes() == original
    assert git(env.sglang, "status", "--porcelain") == ""


def test_dry_run_shows_diff_and_placement_and_writes_nothing(env: Env, pk: Callable[..., Run]) -> None:
    pool = env.sglang / POOL
    pool.write_text("# moved down\n# by two lines\n" + pool.read_text())
    env.commit("two lines on top")
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", "--dry-run", INDEX_K, *tgt(env))
    assert run.code == EXIT_OK, run.err
    assert "dry run of apply" in run.out and "would-apply index-k-bytes v2" in run.out
    assert "hunk #1 of 0001-count-index-k-bytes.patch at line 5 (offset +2 from 3)" in run.out
    assert "-    index_k = head_dim\n" in run.out
    assert "+    index_k = head_dim * 2\n" in run.out
    unchanged(env, before)


def test_apply_json_then_reapply_says_already_applied(env: Env, pk: Callable[..., Run]) -> None:
    data = pk("apply", "--json", INDEX_K, *tgt(env)).json()
    assert data["ok"] is True and data["op"] == "apply"
    assert data["target"] == f"sglang={env.sglang}"
    [fix] = data["fixes"]
    assert (fix["name"], fix["version"], fix["outcome"]) == (INDEX_K, 2, "applied")
    assert [f["path"] for f in fix["files"]] == [POOL]
    assert fix["files"][0]["hunks"][0]["line"] == 3

    before = snapshot(env.sglang, env.serve)
    again = pk("apply", INDEX_K, *tgt(env))
    assert again.code == EXIT_OK
    assert "already-applied index-k-bytes v2" in again.out
    assert snapshot(env.sglang, env.serve) == before
    again_json = pk("apply", "--json", INDEX_K, *tgt(env)).json()
    assert again_json["fixes"][0]["outcome"] == "already-applied"


def test_verify_reruns_checks_of_applied_fixes_only(env: Env, pk: Callable[..., Run]) -> None:
    before = snapshot(env.sglang, env.serve)
    not_applied = pk("verify", INDEX_K, *tgt(env))
    assert not_applied.code == EXIT_CHECK_FAILED
    assert INDEX_K in not_applied.err and "not applied" in not_applied.err
    unchanged(env, before)

    assert pk("apply", INDEX_K, *tgt(env)).code == EXIT_OK
    before = snapshot(env.sglang, env.serve)
    run = pk("verify", "--json", INDEX_K, *tgt(env))
    assert run.code == EXIT_OK, run.err
    [fix] = run.json()["fixes"]
    assert fix["outcome"] == "verified"
    assert {c["kind"] for c in fix["verification"]} == {"python-syntax", "python-script"}
    assert all(c["ok"] for c in fix["verification"])
    assert snapshot(env.sglang, env.serve) == before


def test_drift_fails_status_exit_code_and_rollback_until_forced(env: Env, pk: Callable[..., Run]) -> None:
    original = (env.sglang / POOL).read_bytes()
    assert pk("apply", INDEX_K, *tgt(env)).code == EXIT_OK
    assert pk("status", "--exit-code", *tgt(env)).code == EXIT_OK
    with (env.sglang / POOL).open("a") as fh:
        fh.write("# a hot fix made by hand\n")

    assert pk("status", *tgt(env)).code == EXIT_OK  # without --exit-code drift is only shown
    drifted = pk("status", "--exit-code", *tgt(env))
    assert drifted.code == EXIT_CHECK_FAILED
    assert "drifted" in drifted.out and POOL in drifted.out

    before = snapshot(env.sglang, env.serve)
    refused = pk("rollback", INDEX_K, *tgt(env))
    assert refused.code == EXIT_CHECK_FAILED
    assert POOL in refused.err and "--force" in refused.err
    assert snapshot(env.sglang, env.serve) == before

    forced = pk("rollback", "--force", INDEX_K, *tgt(env))
    assert forced.code == EXIT_OK, forced.err
    assert (env.sglang / POOL).read_bytes() == original
    assert git(env.sglang, "status", "--porcelain") == ""


def test_a_newer_catalog_version_is_outdated_and_apply_upgrades_it(env: Env, pk: Callable[..., Run]) -> None:
    """status says outdated (and --exit-code fails) while the catalog has a newer version
    than the target; apply upgrades it in one transaction and says so (issue 13, 8-9)."""
    assert pk("apply", INDEX_K, *tgt(env)).code == EXIT_OK
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text().replace("version = 2\n", "version = 3\n", 1)
                        + '\n[[changelog]]\nversion = 3\ndate = "2026-03-01"\n'
                          'base_release = "0.5.21"\nsummary = "Same change, new version."\n')
    status = pk("status", "--exit-code", *tgt(env))
    assert status.code == EXIT_CHECK_FAILED, status.err
    assert "outdated (v2 applied, v3 in the catalog)" in status.out
    assert pk("status", "--json", *tgt(env)).json()["status"]["fixes"][0]["catalog_version"] == 3
    dry = pk("apply", "--dry-run", INDEX_K, *tgt(env))
    assert dry.code == EXIT_OK and "would-upgrade index-k-bytes v2 -> v3" in dry.out
    upgraded = pk("apply", "--json", INDEX_K, *tgt(env)).json()["fixes"][0]
    assert (upgraded["outcome"], upgraded["from_version"], upgraded["version"]) == ("upgraded", 2, 3)
    assert pk("status", "--exit-code", *tgt(env)).code == EXIT_OK


def test_an_upgrade_over_drift_is_refused_until_forced(env: Env, pk: Callable[..., Run]) -> None:
    """The refusal names --force, and apply takes it (the drift is discarded, as rollback's)."""
    assert pk("apply", INDEX_K, *tgt(env)).code == EXIT_OK
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text().replace("version = 2\n", "version = 3\n", 1)
                        + '\n[[changelog]]\nversion = 3\ndate = "2026-03-01"\n'
                          'base_release = "0.5.21"\nsummary = "Same change, new version."\n')
    with (env.sglang / POOL).open("a") as fh:
        fh.write("# a hot fix made by hand\n")
    before = snapshot(env.sglang, env.serve)
    refused = pk("apply", INDEX_K, *tgt(env))
    assert refused.code == EXIT_CHECK_FAILED and "--force" in refused.err and POOL in refused.err
    assert snapshot(env.sglang, env.serve) == before
    forced = pk("apply", "--force", "--json", INDEX_K, *tgt(env))
    assert forced.code == EXIT_OK, forced.err
    assert forced.json()["fixes"][0]["outcome"] == "upgraded"
    assert "# a hot fix made by hand" not in (env.sglang / POOL).read_text()
    assert pk("status", "--exit-code", *tgt(env)).code == EXIT_OK


# -- bad input: a clear message, a usage exit, the target untouched --------------------------


def _manifest(env: Env, fix: str = INDEX_K) -> Path:
    return env.catalog / "manifests" / f"{fix}.toml"


def test_malformed_toml_names_the_manifest_and_line(env: Env, pk: Callable[..., Run]) -> None:
    manifest = _manifest(env)
    lines = manifest.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if line.startswith("status = "))
    lines[number - 1] = 'status = "active\n'
    manifest.write_text("".join(lines))
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE
    assert f"{manifest}:{number}" in run.err
    unchanged(env, before)


def test_unknown_manifest_key_is_named_with_a_suggestion(env: Env, pk: Callable[..., Run]) -> None:
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text().replace('description = "double', 'descripton = "double'))
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE
    assert str(manifest) in run.err and "patches[1].descripton" in run.err
    assert "description" in run.err.replace("descripton", "")
    unchanged(env, before)


def test_missing_patch_file_is_named(env: Env, pk: Callable[..., Run]) -> None:
    (env.catalog / POOL_PATCH).unlink()
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE
    assert POOL_PATCH in run.err and str(_manifest(env)) in run.err
    unchanged(env, before)


def test_malformed_hunk_names_the_patch_and_line(env: Env, pk: Callable[..., Run]) -> None:
    patch = env.catalog / POOL_PATCH
    text = patch.read_text()
    patch.write_text(text.replace("@@ -3,7 +3,8 @@", "@@ -3,7 +3,12 @@"))  # the hunk is short
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE
    assert f"{patch}:" in run.err
    line = run.err.split(f"{patch}:", 1)[1].split(":", 1)[0]
    assert line.isdigit() and 5 <= int(line) <= len(text.splitlines()) + 1
    unchanged(env, before)


@pytest.mark.parametrize(
    "path", ["python/../../outside.py", "../outside.py", "/tmp/outside.py"], ids=["dotdot", "parent", "absolute"]
)
def test_unsafe_patch_paths_are_refused(env: Env, pk: Callable[..., Run], path: str) -> None:
    outside = env.tmp / "outside.py"
    outside.write_text("    index_k = head_dim\n")
    header = f"--- {path}\n+++ {path}\n" if path.startswith("/") else f"--- a/{path}\n+++ b/{path}\n"
    write_patch(env, INDEX_K, header + "@@ -1,1 +1,1 @@\n-    index_k = head_dim\n+    index_k = head_dim * 2\n")
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text().split("[[preconditions]]")[0])  # no greps of pool.py
    before = snapshot(env.sglang, env.serve, outside)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE, run.err
    assert path in run.err
    unchanged(env, before, outside)


def test_unsafe_patch_path_error_names_the_patch_file(env: Env, pk: Callable[..., Run]) -> None:
    write_patch(env, INDEX_K, one_file_patch("python/../../outside.py"))
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE
    assert "0001-count-index-k-bytes.patch" in run.err


def test_path_through_a_symlink_out_of_the_root_is_refused(env: Env, pk: Callable[..., Run]) -> None:
    outside = env.tmp / "elsewhere"
    outside.mkdir()
    (outside / "pool.py").write_text("    index_k = head_dim\n")
    os.symlink(outside, env.sglang / "python/sglang/escape")
    env.commit("a symlink out of the tree")
    write_patch(env, INDEX_K, one_file_patch("python/sglang/escape/pool.py"))
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text().split("[[preconditions]]")[0])
    before = snapshot(env.sglang, env.serve, outside)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE, run.err
    assert "python/sglang/escape/pool.py" in run.err
    unchanged(env, before, outside)


# -- the target is not as the fix expects ----------------------------------------------------


def test_missing_target_file_is_a_failed_check(env: Env, pk: Callable[..., Run]) -> None:
    write_patch(env, INDEX_K, one_file_patch("python/sglang/srt/gone.py"))
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text().split("[[preconditions]]")[0])
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_CHECK_FAILED, run.err
    assert "python/sglang/srt/gone.py" in run.err
    unchanged(env, before)


def test_wrong_release_names_found_and_expected(env: Env, pk: Callable[..., Run]) -> None:
    (env.sglang / "python/sglang/_version.py").write_text("__version__ = version = '0.5.19'\n")
    env.commit("SGLang 0.5.19")
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_CHECK_FAILED
    assert "0.5.19" in run.err and "0.5.20, 0.5.21" in run.err
    unchanged(env, before)

    failed = pk("apply", "--json", INDEX_K, *tgt(env))
    assert failed.code == EXIT_CHECK_FAILED
    data = failed.json()
    assert data["ok"] is False and data["error"]["type"] == "PreconditionFailed"
    assert "0.5.19" in data["error"]["message"]
    unchanged(env, before)


def _read_only(directory: Path) -> Callable[[], None]:
    """A directory even root cannot write to: a read-only bind mount (as tests/engine does)."""
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        return lambda: directory.chmod(mode)
    if subprocess.run(["mount", "--bind", str(directory), str(directory)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here, so root cannot be denied writing")
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], capture_output=True).returncode:
        subprocess.run(["umount", str(directory)], check=True)
        pytest.skip("cannot remount read-only here, so root cannot be denied writing")
    return lambda: subprocess.run(["umount", str(directory)], check=True)


@pytest.fixture
def read_only_target(env: Env) -> Iterator[Path]:
    undo = _read_only(env.sglang)
    try:
        yield env.sglang
    finally:
        undo()


def test_read_only_target_is_refused_untouched(env: Env, pk: Callable[..., Run], read_only_target: Path) -> None:
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code != EXIT_OK
    assert f"no write permission on {env.sglang / 'python/sglang/srt'}" in run.err
    assert "make it writable" in run.err
    unchanged(env, before)


def test_read_only_target_exits_6(env: Env, pk: Callable[..., Run], read_only_target: Path) -> None:
    assert pk("apply", INDEX_K, *tgt(env)).code == EXIT_PERMISSION


def test_conflict_when_the_context_is_not_there(env: Env, pk: Callable[..., Run]) -> None:
    pool = env.sglang / POOL
    pool.write_text(pool.read_text().replace("kv = kv_heads * head_dim * dtype_bytes", "kv = kv_heads * head_dim"))
    env.commit("local change to the context")
    before = snapshot(env.sglang, env.serve)
    run = pk_subprocess(env, "apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_CONFLICT, run.err
    assert POOL in run.err and "Traceback" not in run.err
    unchanged(env, before)


def test_failed_verification_restores_every_byte(env: Env, pk: Callable[..., Run]) -> None:
    script = env.catalog / "patches" / INDEX_K / "checks/bytes_per_token.py"
    script.write_text(script.read_text() + "raise SystemExit('the pool is still too small')\n")
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_CHECK_FAILED
    assert "the pool is still too small" in run.err and "restored" in run.err
    state = env.sglang / ".patchkit"
    after = {k: v for k, v in snapshot(env.sglang, env.serve).items() if not k.startswith(str(state))}
    assert after == before
    assert not (state / "state.json").exists() and not (state / "journal.json").exists()
    assert git(env.sglang, "status", "--porcelain") == ""


def test_a_missing_extra_root_names_its_own_option(env: Env) -> None:
    missing = env.tmp / "no-such-serve"
    run = pk_subprocess(env, "apply", "prefill-hicache-off", "--target", env.sglang,
                        "--root", f"serve={missing}")
    assert run.code == EXIT_TARGET
    assert str(missing) in run.err and "--root serve=PATH" in run.err and "--target" not in run.err


def test_missing_target_root_exits_5(env: Env) -> None:
    missing = env.tmp / "no-such-checkout"
    run = pk_subprocess(env, "apply", INDEX_K, "--target", missing, columns=40)
    assert run.code == EXIT_TARGET
    assert str(missing) in run.err  # whole, even on a narrow terminal
    assert "does not exist" in run.err and "--target" in run.err
    assert not missing.exists()


def test_malformed_root_option_is_a_usage_error(env: Env, pk: Callable[..., Run]) -> None:
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env), "--root", str(env.serve))
    assert run.code == EXIT_USAGE
    assert "--root" in run.err and "NAME=PATH" in run.err
    unchanged(env, before)


@pytest.fixture
def lock_held(env: Env) -> Iterator[int]:
    """Another process holds the target's lock: an flock on the state root directory."""
    with lock_held_elsewhere(env.sglang) as pid:
        yield pid


def test_lock_busy_exits_4_naming_the_holder(env: Env, lock_held: int) -> None:
    fd = os.open(env.sglang, os.O_RDONLY | os.O_DIRECTORY)
    try:  # the lock really is the directory's flock
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    before = snapshot(env.sglang, env.serve)
    run = pk_subprocess(env, "apply", INDEX_K, *tgt(env), "--lock-timeout", "0.2")
    assert run.code == EXIT_LOCKED, run.err
    assert str(lock_held) in run.err and str(env.sglang) in run.err
    assert "--lock-timeout" in run.err  # the way to wait longer, by its name
    unchanged(env, before)


# -- the error boundary ----------------------------------------------------------------------


def test_internal_error_exits_70_with_traceback_only_in_debug(
    env: Env, pk: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("status exploded")

    monkeypatch.setattr(api, "status", broken)
    quiet = pk("status", *tgt(env))
    assert quiet.code == EXIT_INTERNAL
    assert "internal error: RuntimeError: status exploded" in quiet.err
    assert "--debug" in quiet.err and "Traceback" not in quiet.err

    loud = pk("--debug", "status", *tgt(env))
    assert loud.code == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in loud.err and "status exploded" in loud.err

    monkeypatch.setenv("PATCHKIT_DEBUG", "1")
    assert "Traceback (most recent call last)" in pk("status", *tgt(env)).err


def test_json_failure_without_a_result_is_still_json(env: Env, pk: Callable[..., Run]) -> None:
    run = pk("apply", "--json", "nope", *tgt(env))
    assert run.code == EXIT_USAGE
    data = run.json()
    assert data["ok"] is False
    assert data["error"]["type"] == "UnknownFixError" and "nope" in data["error"]["message"]


def test_no_target_is_a_usage_error(env: Env, pk: Callable[..., Run]) -> None:
    run = pk("status")
    assert run.code == EXIT_USAGE
    assert "--target" in run.err


# -- targets: named in patchkit.toml, several roots ------------------------------------------


def test_named_target_from_patchkit_toml(env: Env, pk: Callable[..., Run]) -> None:
    config = env.tmp / "conf" / "patchkit.toml"
    config.parent.mkdir()
    config.write_text(
        'catalog = "../catalog"\n\n'
        '[targets.prod]\npath = "../sglang"\n\n'
        f'[targets.prod.roots]\nserve = "{env.serve}"\n'
    )
    serve_before = (env.serve / "serve.sh").read_bytes()
    run = pk("--config", config, "apply", "pool-guard", "--with-deps", "--target", "prod", catalog=False)
    assert run.code == EXIT_OK, run.err
    assert "applied index-k-bytes v2" in run.out and "applied pool-guard v1" in run.out
    assert b"SGLANG_INDEX_K_DTYPE=bf16" in (env.serve / "serve.sh").read_bytes()
    assert b"per-token bytes must be positive" in (env.sglang / POOL).read_bytes()

    states = pk("--config", config, "status", "--json", "-t", "prod", catalog=False).json()
    assert states["target"] == f"sglang={env.sglang}, serve={env.serve}"
    assert {s["name"]: s["state"] for s in states["status"]["fixes"]}["pool-guard"] == "applied"

    run = pk("--config", config, "rollback", "pool-guard", INDEX_K, "-t", "prod", catalog=False)
    assert run.code == EXIT_OK, run.err
    assert (env.serve / "serve.sh").read_bytes() == serve_before
    assert git(env.sglang, "status", "--porcelain") == ""


def test_extra_root_carries_a_patch_under_serve(env: Env) -> None:
    serve_before = (env.serve / "serve.sh").read_bytes()
    roots = [*tgt(env), "--root", f"serve={env.serve}"]
    applied = invoke(env, "apply", INDEX_K, "pool-guard", *roots, "--json")
    assert applied.exit_code == 0, applied.output
    data = json.loads(applied.output)
    files = {(f["root"], f["path"]) for fix in data["fixes"] for f in fix["files"]}
    assert ("serve", "serve.sh") in files and ("sglang", POOL) in files
    assert (env.serve / "serve.sh").read_bytes().splitlines()[1] == b"export SGLANG_INDEX_K_DTYPE=bf16"
    assert not (env.serve / ".patchkit").exists()  # state lives in the sglang root

    without = CliRunner().invoke(cli, ["--catalog", str(env.catalog), "rollback", "pool-guard", *tgt(env)])
    assert without.exit_code != 0  # the serve root is not part of that target
    assert (env.serve / "serve.sh").read_bytes() != serve_before

    rolled = invoke(env, "rollback", "pool-guard", INDEX_K, *roots)
    assert rolled.exit_code == 0, rolled.output
    assert (env.serve / "serve.sh").read_bytes() == serve_before
    assert git(env.sglang, "status", "--porcelain") == ""


def test_every_exit_code_is_documented_with_what_it_guarantees() -> None:
    """docs/cli.md's table names each code patchkit exits with and what it leaves in the target."""
    import re

    from patchkit import errors

    text = (Path(__file__).resolve().parent.parent / "docs/cli.md").read_text(encoding="utf-8")
    table = text.split("## Exit codes", 1)[1]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \|[^|]*\|(.*)\|$", table, re.M)}
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_")} | {130}
    assert codes <= set(rows)
    for code in codes:
        guarantee = rows[code]
        assert re.search(r"unchanged|may be changed|unknown|complete", guarantee), (code, guarantee)
    assert "nothing ran" in rows[errors.EXIT_SESSION_FAILED]
    assert "may be changed" in rows[errors.EXIT_CONNECTION_LOST]
    assert "status --target" in rows[errors.EXIT_CONNECTION_LOST]


def test_deeply_nested_manifest_exits_2_naming_it(env: Env, pk: Callable[..., Run]) -> None:
    manifest = _manifest(env)
    manifest.write_text(manifest.read_text() + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
    before = snapshot(env.sglang, env.serve)
    run = pk("apply", INDEX_K, *tgt(env))
    assert run.code == EXIT_USAGE, run.err
    assert str(manifest) in run.err and "nested" in run.err
    unchanged(env, before)


def test_reapply_and_verify_of_a_drifted_fix_say_so(env: Env, pk: Callable[..., Run]) -> None:
    assert pk("apply", INDEX_K, *tgt(env)).code == EXIT_OK
    with (env.sglang / POOL).open("a") as fh:
        fh.write("# a hot fix made by hand\n")
    before = snapshot(env.sglang, env.serve)

    again = pk("apply", INDEX_K, *tgt(env))
    assert again.code == EXIT_OK, again.err  # nothing to apply; the drift is said, not an error
    assert "already-applied index-k-bytes v2" in again.out
    assert f"drifted: sglang:{POOL}" in again.out
    assert f"patchkit rollback --force {INDEX_K}" in again.out
    data = pk("apply", "--json", INDEX_K, *tgt(env)).json()
    assert data["ok"] is True
    assert data["fixes"][0]["drifted"] == [{"root": "sglang", "path": POOL, "state": "drifted"}]

    verify = pk("verify", INDEX_K, *tgt(env))
    assert verify.code == EXIT_CHECK_FAILED
    assert f"sglang:{POOL}" in verify.err and "drifted" in verify.err
    assert f"patchkit rollback --force {INDEX_K}" in verify.err
    failed = pk("verify", "--json", INDEX_K, *tgt(env))
    assert failed.code == EXIT_CHECK_FAILED
    error = failed.json()["error"]
    assert error["type"] == "DriftError"
    assert error["details"]["fixes"][0]["drifted"] == [{"root": "sglang", "path": POOL, "state": "drifted"}]
    assert snapshot(env.sglang, env.serve) == before


def test_an_error_that_suggests_commands_says_to_give_them_this_runs_target_options(
        env: Env, pk: Callable[..., Run]) -> None:
    """A refusal's next steps (`patchkit undo`, `patchkit rollback --force`) are copied and run:
    without the target options this run was given they would act on another target (the
    checkout around the working directory, or none). The note names them, quoted for a shell."""
    serve = env.tmp / "serve dir"  # a space: the note quotes what it repeats
    env.serve.rename(serve)
    where = ["--target", env.sglang, f"--root=serve={serve}"]
    assert pk("apply", INDEX_K, *where).code == EXIT_OK
    pool = env.sglang / POOL
    pool.write_text(pool.read_text() + "# edited\n")
    refused = pk("undo", *where)
    assert refused.code == EXIT_CHECK_FAILED
    assert "patchkit rollback --force" in refused.err  # it suggests commands ...
    note = [line for line in refused.err.splitlines() if line.startswith("note: ")]
    assert note == [f"note: run the patchkit commands above with this run's options: --catalog "
                    f"{env.catalog} --target {env.sglang} '--root=serve={serve}'"], refused.err
    json_err = pk("undo", *where, "--json")
    assert json_err.json()["error"]["details"]["options"] == [
        "--catalog", str(env.catalog), "--target", str(env.sglang), f"--root=serve={serve}"]
    bare = pk("list", "--bogus")  # a usage error: no note (it suggests --help)
    assert "note: " not in bare.err


def test_the_options_note_is_for_patchkits_own_suggestions_and_every_option_works_after_the_command(
        env: Env, pk: Callable[..., Run]) -> None:
    """The note repeats the options after the command: `--config` works there as `--catalog`
    does. A hook's own command or output that mentions patchkit is not a suggestion; a refused
    undo names the fixes it would roll back."""
    config = env.tmp / "pk.toml"
    config.write_text(f'[targets.prod]\npath = "{env.sglang}"\n')
    assert pk("apply", INDEX_K, "--config", config, "--target", "prod").code == EXIT_OK  # after
    pool = env.sglang / POOL
    pool.write_text(pool.read_text() + "# edited\n")
    refused = pk("undo", "--config", config, "--target", "prod")
    assert refused.code == EXIT_CHECK_FAILED
    assert f"roll the fixes back with patchkit rollback --force {INDEX_K}" in refused.err
    note = [line for line in refused.err.splitlines() if line.startswith("note: ")]
    assert note == [f"note: run the patchkit commands above with this run's options: --catalog "
                    f"{env.catalog} --config {config} --target prod"], refused.err
    assert pk("rollback", "--force", INDEX_K, *note[0].split(": ", 2)[2].split()).code == EXIT_OK

    hooked = pk("apply", INDEX_K, "--target", env.sglang, "--health-cmd",
                "echo run patchkit undo; exit 1")
    assert hooked.code == EXIT_CHECK_FAILED and "patchkit undo" in hooked.err
    assert "note: " not in hooked.err, hooked.err

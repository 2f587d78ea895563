"""Rough edges a new user's first hour found in the command line: which catalog a run uses,
what a fix's error says in ``--json``, what a failed write in the state root names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from patchkit.cli.main import main
from patchkit.engine.fsops import write_json
from patchkit.engine.store import write_failure
from patchkit.errors import EXIT_PERMISSION, EXIT_USAGE
from tests.test_remote import make_tree

REPO = Path(__file__).resolve().parents[1]

SAMPLES = Path(__file__).parent / "samples"
SAMPLE_FIXES = ["index-k-bytes", "pool-guard"]  # what `list` shows of the sample catalog


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    """The real ``main()`` in-process: the exit code the shell would see, stdout, stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture
def own_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty catalog of the user's own, as `patchkit init` lays it out (``catalog = "."``),
    the working directory; no PATCHKIT_* variable set."""
    mine = tmp_path / "mine"
    (mine / "manifests").mkdir(parents=True)
    (mine / "patches").mkdir()
    (mine / "patchkit.toml").write_text('catalog = "."\n')
    for var in ("PATCHKIT_CATALOG", "PATCHKIT_CONFIG", "PATCHKIT_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(mine)
    return mine


def fix_names(out: str) -> list[str]:
    return sorted(f["name"] for f in json.loads(out))


# -- which catalog: --catalog, then $PATCHKIT_CATALOG, then patchkit.toml, then discovery ------

def test_patchkit_catalog_wins_over_the_catalog_key_of_patchkit_toml(
        own_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    shutil.copytree(SAMPLES / "catalog", other)
    monkeypatch.setenv("PATCHKIT_CATALOG", str(other))
    code, out, err = run(capsys, "list", "--json")
    assert code == 0, err
    assert fix_names(out) == SAMPLE_FIXES
    code, out, err = run(capsys, "--catalog", own_catalog, "list", "--json")  # --catalog first
    assert (code, fix_names(out)) == (0, []), err


@pytest.mark.parametrize("where", ["own catalog", "empty directory"])
def test_a_patchkit_catalog_that_does_not_exist_is_an_error_naming_it(
        where: str, own_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    if where == "empty directory":
        (tmp_path / "empty").mkdir()
        monkeypatch.chdir(tmp_path / "empty")
    missing = tmp_path / "no-such-catalog"
    monkeypatch.setenv("PATCHKIT_CATALOG", str(missing))
    code, out, err = run(capsys, "list")
    assert code == EXIT_USAGE, (out, err)
    assert f"error: PATCHKIT_CATALOG={missing}: no such directory" in err, err
    code, out, err = run(capsys, "list", "--json")
    assert code == EXIT_USAGE
    error = json.loads(out)["error"]
    assert error["details"] == {"catalog": str(missing), "given_by": "PATCHKIT_CATALOG"}, error


def test_a_catalog_option_that_does_not_exist_is_an_error_naming_it(
        own_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-catalog"
    for args in (["--catalog", missing, "list"], ["list", "--catalog", missing]):
        code, out, err = run(capsys, *args)
        assert code == EXIT_USAGE, (out, err)
        assert f"error: --catalog {missing}: no such directory" in err, err
    (tmp_path / "plain").mkdir()  # a directory, but no catalog
    code, out, err = run(capsys, "--catalog", tmp_path / "plain", "list")
    assert code == EXIT_USAGE
    assert f"error: --catalog {tmp_path / 'plain'}: holds no manifests/ directory" in err, err
    # --catalog comes first: a PATCHKIT_CATALOG it overrides is not looked at
    monkeypatch.setenv("PATCHKIT_CATALOG", str(missing))
    code, out, err = run(capsys, "--catalog", SAMPLES / "catalog", "list", "--json")
    assert (code, fix_names(out)) == (0, SAMPLE_FIXES), err


def test_a_catalog_key_that_does_not_exist_names_patchkit_toml_and_its_line(
        own_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (own_catalog / "patchkit.toml").write_text('# mine\n\ncatalog = "elsewhere"\n')
    code, out, err = run(capsys, "list")
    assert code == EXIT_USAGE, (out, err)
    assert (f"error: patchkit.toml:3: the catalog key names {own_catalog / 'elsewhere'}: "
            "no such directory") in err, err


# -- a fix's error in --json names the fix and the file the message names ---------------------

@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed-package layout of the sample tree (``sglang/`` with no ``python/``), where
    a file lies elsewhere than the patch names it: ``sglang/srt/pool.py``."""
    site = tmp_path / "site"
    shutil.copytree(SAMPLES / "tree" / "sglang" / "python" / "sglang", site / "sglang")
    (site / "sglang" / "version.py").unlink()
    (site / "sglang" / "_version.py").write_text("__version__ = version = '0.5.21'\n")
    for var in ("PATCHKIT_CATALOG", "PATCHKIT_CONFIG", "PATCHKIT_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return site


def test_a_conflict_names_the_fix_and_the_installed_file_in_its_details(
        installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = installed / "sglang/srt/pool.py"
    pool.write_text(pool.read_text().replace("kv = kv_heads * head_dim * dtype_bytes",
                                             "kv = kv_heads * head_dim"))
    code, out, err = run(capsys, "--catalog", SAMPLES / "catalog", "apply", "index-k-bytes",
                         "--target", installed, "--json")
    assert code == 3, err
    error = json.loads(out)["error"]
    details = error["details"]
    assert error["message"].startswith("fix index-k-bytes: sglang:sglang/srt/pool.py: hunk #1 of "), error
    assert {k: details[k] for k in ("fix", "root", "path", "where", "patch", "patch_path")} == {
        "fix": "index-k-bytes", "root": "sglang", "path": "sglang/srt/pool.py",
        "where": "sglang:sglang/srt/pool.py", "patch": "0001-count-index-k-bytes.patch",
        "patch_path": "python/sglang/srt/pool.py"}, details


def test_a_broken_patch_and_a_failed_precondition_name_the_fix_too(
        installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    patch = catalog / "patches/index-k-bytes/0001-count-index-k-bytes.patch"
    patch.write_text(patch.read_text().split("@@")[0] + "@@ -1,3 +1,3 @@\n garbage\n")
    code, out, err = run(capsys, "--catalog", catalog, "apply", "index-k-bytes",
                         "--target", installed, "--json")
    assert code == EXIT_USAGE, err
    error = json.loads(out)["error"]
    assert error["type"] == "PatchFormatError", error
    assert error["details"]["fix"] == "index-k-bytes", error
    assert error["message"].startswith(error["details"]["file"] + ":"), error
    assert error["details"]["file"] == str(patch)

    (installed / "sglang/srt/pool.py").unlink()
    code, out, err = run(capsys, "--catalog", SAMPLES / "catalog", "apply", "index-k-bytes",
                         "--target", installed, "--json")
    assert code == 1, err
    error = json.loads(out)["error"]
    failed = error["details"]["failures"][0]
    assert (failed["fix"], failed["where"]) == ("index-k-bytes", "sglang:sglang/srt/pool.py")
    assert f"fix index-k-bytes: {failed['name']}" in error["message"], error


# -- a write in the state root that fails names the file and the OS error ---------------------

@pytest.fixture
def read_only() -> Iterator[Any]:
    """Make a directory read-only even for root (a read-only bind mount); undone at the end."""
    mounted: list[Path] = []

    def make(directory: Path) -> None:
        if os.geteuid() != 0:
            directory.chmod(0o555)
            mounted.append(directory)
            return
        if subprocess.run(["mount", "--bind", str(directory), str(directory)],
                          capture_output=True).returncode:
            pytest.skip("cannot bind-mount here, so root cannot be denied writing")
        mounted.append(directory)
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)],
                          capture_output=True).returncode:
            pytest.skip("cannot remount read-only here, so root cannot be denied writing")

    yield make
    for directory in reversed(mounted):
        if os.geteuid() != 0:
            directory.chmod(0o755)
        else:
            subprocess.run(["umount", str(directory)], check=True)


def test_a_failed_write_names_the_file_not_its_temporary_sibling(tmp_path: Path,
                                                                 read_only: Any) -> None:
    state = tmp_path / ".patchkit"
    state.mkdir()
    read_only(state)
    with pytest.raises(OSError) as exc:
        write_json(str(state / "state.json"), {"format": 1})
    assert "patchkit-tmp" in str(exc.value.filename)  # what the OS names: the temporary file
    said = write_failure(exc.value, str(tmp_path))
    os_error = "Read-only file system (EROFS)" if os.geteuid() == 0 else "Permission denied (EACCES)"
    assert said.startswith(f"cannot write {state / 'state.json'}: {os_error}; "), said


def test_a_journal_too_large_to_write_names_it_and_leaves_no_state_root(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A write of the journal that failed (``ulimit -f``: EFBIG, raised by the write to its
    descriptor, which names no file) said "cannot write <the root>: ... make it writable", and
    left ``.patchkit/`` with its ``.gitignore`` and the journal's temporary file on a target
    that had none (a trial). Now the journal is named, with advice for that error, and the
    state root goes, as the temporary file does."""
    roots = make_tree(tmp_path / "tree")
    code, out, err = run_limited(
        ["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", "--target",
         roots["sglang"], "--root", f"serve={roots['serve']}", "--json"], file_size=300)
    assert code == EXIT_PERMISSION, (out, err)
    error = json.loads(out)["error"]
    journal = str(Path(roots["sglang"], ".patchkit", "journal.json"))
    assert error["details"] == {"path": journal, "errno": "EFBIG"}, error
    assert f"cannot write {journal}: File too large (EFBIG); the file size limit" in err, err
    assert "make it writable" not in err, err
    assert not Path(roots["sglang"], ".patchkit").exists()


def run_limited(args: list[str], *, file_size: int) -> tuple[int, str, str]:
    """``patchkit ARGS`` in a process whose files may not grow past ``file_size`` bytes."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    done = subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True,
                          text=True, preexec_fn=limit, cwd=REPO)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("op, read_only_dir", [("undo", ".patchkit"),
                                               ("rollback", ".patchkit/txn")])
def test_a_state_root_that_cannot_be_written_names_the_file_and_the_os_error(
        tmp_path: Path, read_only: Any, capsys: pytest.CaptureFixture[str], op: str,
        read_only_dir: str) -> None:
    roots = make_tree(tmp_path / "tree")
    where = ["--catalog", SAMPLES / "catalog", op, *(["index-k-bytes"] if op == "rollback" else []),
             "--target", roots["sglang"], "--root", f"serve={roots['serve']}", "--json"]
    assert run(capsys, "--catalog", SAMPLES / "catalog", "apply", "index-k-bytes", "--target",
               roots["sglang"], "--root", f"serve={roots['serve']}")[0] == 0
    directory = Path(roots["sglang"], read_only_dir)
    read_only(directory)
    code, out, err = run(capsys, *where)
    assert code == EXIT_PERMISSION, (out, err)
    error = json.loads(out)["error"]
    assert error["details"]["path"].startswith(f"{directory}/"), error
    assert "patchkit-tmp" not in error["details"]["path"], error
    assert f"cannot write {error['details']['path']}: " in err, err
    if os.geteuid() == 0:  # a read-only mount
        assert error["details"]["errno"] == "EROFS", error
        assert "Read-only file system (EROFS)" in err and "remount it read-write" in err, err
    assert "make the state root writable" not in err, err


def test_every_json_object_a_command_prints_on_success_says_ok(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    """A script checks ``ok`` whatever the command: show, log, diff, matrix and plan had none
    on success (status, apply, verify, rollback, undo and sync had it)."""
    cat = ["--catalog", str(SAMPLES / "catalog")]
    roots = make_tree(tmp_path / "tree")
    for args in (["show", "index-k-bytes"], ["log"], ["plan", "index-k-bytes"],
                 ["log", "--target", roots["sglang"], "--root", f"serve={roots['serve']}"],
                 ["status", "--target", roots["sglang"], "--root", f"serve={roots['serve']}"]):
        code, out, err = run(capsys, *cat, *args, "--json")
        assert code == 0, (args, err)
        assert json.loads(out)["ok"] is True, args
    code, out, err = run(capsys, "diff", "dsv4-bf16-sizing", "--versions", "3", "4", "--json")
    assert code == 0, err
    assert json.loads(out)["ok"] is True
    code, out, err = run(capsys, "plan", "--collections-path", "--json")  # it printed a bare path
    assert code == 0 and json.loads(out)["collections_path"].endswith("collection"), (out, err)
    code, out, err = run(capsys, "plan", "--collections-path")
    assert out.strip() == json.loads(run(capsys, "plan", "--collections-path", "--json")[1])[
        "collections_path"]  # plain: the path alone, for ANSIBLE_COLLECTIONS_PATH=$(...)

"""The newer surfaces as hostile ground (issue 26, and issue 25 items 4 and 5): import, export,
installed packages and signals. Each case ran wrong on the main branch before these fixes;
each runs on real files, real git and real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api, errors
from patchkit.catalog import Catalog, writer
from patchkit.catalog.series import diff_files
from patchkit.errors import EXIT_TARGET, EXIT_USAGE
from patchkit.targets.remote import RemoteTarget
from patchkit.targets.transport import SshSpec
from tests.fixtures.sshd import SshServer
from tests.test_authoring import catalog_state, flat, git, patchkit
from tests.test_hostile import MOD, Case, digest
from tests.test_interop_hostile import DIFF, catalog, mail  # noqa: F401  (catalog: a fixture)

PY = sys.executable


def refused(catalog: Path, args: list[str], *expected: str, code: int = EXIT_USAGE) -> str:
    """The command exits ``code`` saying each of ``expected``; the catalog and its git index
    and HEAD are as before, and `list` still reads the catalog."""
    before, head = catalog_state(catalog), git(catalog, "rev-parse", "HEAD")
    result = patchkit(catalog, *args)
    assert result.exit_code == code, result.output
    message = flat(result.output)
    for text in expected:
        assert text in message, message
    assert "Traceback" not in result.output and "internal error" not in message
    assert catalog_state(catalog) == before
    assert git(catalog, "rev-parse", "HEAD") == head
    assert patchkit(catalog, "list").exit_code == 0
    return message


def patched(base: Path) -> Case:
    """A Case whose fix ``h`` changes one line of MOD."""
    case = Case(base)
    old = (case.root / MOD).read_bytes()
    case.patch(diff_files(old, old.replace(b"return x + 3\n", b"return x + 33\n"), MOD).encode())
    return case


# -- 3: an import is all or nothing ---------------------------------------------------------

IMPORT_CASES = {
    "latin1-body": (mail().replace(b"The pool needs 22.", b"caf\xe9 needs 22."),
                    ["the message of the patch", "is not UTF-8", "iconv"]),
    "nul-subject": (mail(subject=b"a\x00b"), ["holds the control character '\\x00'"]),
    "nul-body": (mail().replace(b"The pool needs 22.", b"nul\x00here"),
                 ["holds the control character"]),
    "long-subject": (mail(subject=b"x" * 200_000), ["200000 characters long", "at most 500"]),
}


@pytest.mark.parametrize("case", sorted(IMPORT_CASES))
def test_an_import_that_fails_leaves_the_catalog_and_its_index_as_before(
        catalog: Path, tmp_path: Path, case: str) -> None:
    data, expected = IMPORT_CASES[case]
    path = tmp_path / f"{case}.mbox"
    path.write_bytes(data)
    refused(catalog, ["import", "--mbox", str(path), "--release", "0.5.23"], str(path), *expected)


def test_a_failing_commit_undoes_the_import_and_puts_the_index_back(catalog: Path,
                                                                     tmp_path: Path) -> None:
    (tmp_path / "one.mbox").write_bytes(mail())
    hook = catalog / ".git" / "hooks"
    (catalog / ".git" / "index.lock").write_text("")  # git commit cannot take the index
    try:
        before = git(catalog, "status", "--porcelain")
        result = patchkit(catalog, "import", "--mbox", str(tmp_path / "one.mbox"), "--release",
                          "0.5.23")
        assert result.exit_code == EXIT_TARGET, result.output
        assert "Nothing was imported" in flat(result.output)
    finally:
        (catalog / ".git" / "index.lock").unlink()
    assert hook.is_dir()
    assert git(catalog, "status", "--porcelain") == before
    assert not (catalog / "manifests" / "a-two-is-twenty-two.toml").exists()
    assert not (catalog / "patches" / "a-two-is-twenty-two").exists()


# -- 3, the kill sweep: SIGKILL at every write point of an import ---------------------------

#: One process sweeps every point: it loads patchkit once, then forks a child per run that
#: imports with PATCHKIT_FAULT set (the child is what gets SIGKILLed), and says how it ended.
SWEEP = """
import json, os, sys
from pathlib import Path
from patchkit.catalog import Catalog, writer
from patchkit.engine import faults
from patchkit.interop import importer
for line in sys.stdin:
    point, mbox, replace = line.split()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ["PATCHKIT_FAULT"] = "no-such-point:1" if point == "-" else point
            faults.reset()
            planned = importer.plan(importer.from_mbox(Path(mbox)), one=False, name=None)
            importer.import_fixes(Catalog(sys.argv[1]), planned, release="0.5.23",
                                  replace=replace == "1")
            print(json.dumps({"seen": faults._seen}), flush=True)
            code = 0
        except BaseException as exc:
            print(json.dumps({"error": repr(exc)}), flush=True)
        os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    print(json.dumps({"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}),
          flush=True)
"""


class Sweeper:
    def __init__(self, catalog: Path) -> None:
        self.proc = subprocess.Popen([PY, "-c", SWEEP, str(catalog)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, mbox: Path, point: str = "-", replace: bool = False) -> dict:
        """One import (killed at ``point``, or run whole with "-"): what it said and how it
        ended (``signal``: 9 for a kill)."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{point} {mbox} {'1' if replace else '0'}\n")
        said: dict = {}
        while "signal" not in said:
            said.update(json.loads(self.proc.stdout.readline()))
        return said

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(30)


def fixes_state(catalog: Path) -> dict:
    """The catalog's files (not .git, not the staging area) and the fixes git has committed."""
    return ({k: v[0] for k, v in catalog_state(catalog).items()
             if not k.startswith((".git/", writer.STAGE_DIR))},
            git(catalog, "ls-files").split())


@pytest.mark.parametrize("replace", [False, True], ids=["new", "replacing"])
def test_an_import_killed_at_every_write_point_is_as_before_or_fully_imported(
        catalog: Path, tmp_path: Path, replace: bool) -> None:
    """Three patches as three fixes in one import; killed (SIGKILL) at each occurrence of each
    write point in turn. Right after the kill `list` reads the catalog and shows the fixes of
    before or all of the imported ones; the next import finishes or undoes the killed one."""
    three = tmp_path / "three.mbox"
    three.write_bytes(mail() + mail(subject=b"b: three") + mail(subject=b"c: four"))
    sweep = Sweeper(catalog)
    try:
        if replace:  # the fixes exist: the import replaces them (their old files moved aside)
            old = tmp_path / "old.mbox"
            old.write_bytes(three.read_bytes().replace(b"The pool needs 22.", b"Older."))
            assert sweep.run(old)["signal"] == 0
        before = fixes_state(catalog)
        seen = sweep.run(three, replace=replace)["seen"]
        after = fixes_state(catalog)
        assert after != before
        git(catalog, "reset", "-q", "--hard", "HEAD~1")  # back to before, for the sweep
        git(catalog, "clean", "-qfdx")
        assert fixes_state(catalog) == before
        points = [f"{p}:{n}" for p in writer.FAULT_POINTS for n in range(1, seen.get(p, 0) + 1)]
        assert {p.split(":")[0] for p in points} == set(writer.FAULT_POINTS)
        names = {"a-two-is-twenty-two", "b-three", "c-four"}
        for point in points:
            assert sweep.run(three, point, replace) == {"signal": signal.SIGKILL}, point
            listed = patchkit(catalog, "list")
            assert listed.exit_code == 0, (point, listed.output)
            shown = {line.split("\t")[0] for line in listed.output.splitlines()} & names
            if not replace:  # (a replaced fix can be missing until the next import settles it)
                assert shown in (set(), names), (point, shown)
            writer.recover(Catalog(catalog))  # what the next import does first
            state = fixes_state(catalog)
            assert state in (before, after), point
            if state == after:
                git(catalog, "reset", "-q", "--hard", "HEAD~1")
                git(catalog, "clean", "-qfdx")
            assert fixes_state(catalog) == before, point
    finally:
        sweep.close()


# -- 4: SIGHUP and SIGQUIT roll back as SIGTERM does: tests/test_hostile_env.py, with SIGTERM


# -- 7: import refuses what apply refuses ---------------------------------------------------

@pytest.mark.parametrize("where", [".patchkit/state.json", ".git/config",
                                   "python/.git/hooks/post-checkout"])
def test_import_refuses_a_patch_into_patchkit_or_git_as_apply_does(
        catalog: Path, tmp_path: Path, where: str) -> None:
    diff = DIFF.replace(b"python/sglang/a.py", where.encode())
    path = tmp_path / "reserved.mbox"
    path.write_bytes(mail(diff))
    refused(catalog, ["import", "--mbox", str(path), "--release", "0.5.23"], str(path),
            f"names '{where}'", "a patch may not write there", "apply would refuse it")


# -- 9: a state.json of the wrong shape is damaged --------------------------------------------

@pytest.mark.parametrize("state", [
    {"format": 1, "fixes": [{"name": 5}]},
    {"format": 1, "fixes": {"h": {}}},
    {"format": 1, "fixes": [{"name": "h", "version": 1, "files": [{"root": 1}]}]},
    {"format": 1, "fixes": ["h"]},
], ids=["name-a-number", "fixes-an-object", "file-record", "fix-a-string"])
def test_a_state_record_of_the_wrong_shape_is_reported_damaged(tmp_path: Path,
                                                              state: dict) -> None:
    case = Case(tmp_path)
    old = (case.root / MOD).read_bytes()
    case.patch(diff_files(old, old.replace(b"return x + 3\n", b"return x + 33\n"), MOD).encode())
    (case.root / ".patchkit").mkdir()
    (case.root / ".patchkit" / "state.json").write_text(json.dumps(state))
    result = subprocess.run([PY, "-m", "patchkit", "--catalog", str(case.catalog_dir), "status",
                             "--target", str(case.root)], capture_output=True, text=True)
    assert result.returncode == EXIT_TARGET, result.stdout + result.stderr
    assert "state.json is damaged" in result.stderr, result.stderr
    assert "applied" not in result.stdout


# -- 11: a conflict that is only a line ending says so ----------------------------------------

def test_a_conflict_on_line_endings_names_crlf(tmp_path: Path) -> None:
    case = Case(tmp_path)
    old = (case.root / MOD).read_bytes()
    case.patch(diff_files(old, old.replace(b"return x + 3\n", b"return x + 33\n"), MOD).encode())
    (case.root / MOD).write_bytes(old.replace(b"\n", b"\r\n"))
    error = case.refused(errors.ConflictError)
    assert "different line endings" in error.message, error.message
    assert "ends in LF (\\n) in the patch and in CRLF (\\r\\n) in the file" in error.message


# -- 12: a grep check without count or present says which is missing ---------------------------

def test_a_grep_check_with_neither_count_nor_present_says_neither(tmp_path: Path) -> None:
    case = Case(tmp_path)
    manifest = case.catalog_dir / "manifests/h.toml"
    manifest.write_text(manifest.read_text() + "\n[[verification]]\nkind = \"grep\"\n"
                        f"path = \"{MOD}\"\npattern = \"x\"\n")
    with pytest.raises(errors.ManifestError) as info:
        Catalog(case.catalog_dir).get("h")
    assert "has neither" in info.value.message and "not both" not in info.value.message
    assert "Add count = N" in info.value.message


# -- 25.4 and 25.5: an existing or shipped name; the base release travels -----------------------

def test_import_refuses_an_existing_or_shipped_name_unless_replace(catalog: Path,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "out"
    made = patchkit(catalog, "export", "dsv4-bf16-sizing", "--format", "mbox", "-o", str(out))
    assert made.exit_code == 0, made.output
    exported = out / "dsv4-bf16-sizing.mbox"
    assert "Patchkit-Release: " in exported.read_text()
    # shipped: refused, in the dry run too, naming --replace
    for extra in ([], ["--dry-run"]):
        refused(catalog, ["import", "--mbox", str(exported), *extra], "'dsv4-bf16-sizing' already "
                "exists (shipped with patchkit", "--replace")
    dry = patchkit(catalog, "import", "--mbox", str(exported), "--replace", "--dry-run")
    assert dry.exit_code == 0 and "replacing the shipped fix" in flat(dry.output), dry.output
    # no --release: the export says the base release
    done = patchkit(catalog, "import", "--mbox", str(exported), "--replace")
    assert done.exit_code == 0, done.output
    shipped = Catalog.open(catalog).beside.get("dsv4-bf16-sizing")
    mine = Catalog(catalog).get("dsv4-bf16-sizing")
    assert mine.manifest_path.parent == catalog / "manifests"
    assert mine.upstream.base_release == shipped.upstream.base_release
    # now the user's own: refused again without --replace, replaced with it
    refused(catalog, ["import", "--mbox", str(exported)], f"already exists (in {catalog})",
            "pass --name to import it under another name")
    # a --name that is taken too: the message asks for another, not for the flag given
    said = refused(catalog, ["import", "--mbox", str(exported), "--name", "dsv4-bf16-sizing"],
                   "already exists", "give --name another name")
    assert "pass --name" not in said
    again = patchkit(catalog, "import", "--mbox", str(exported), "--replace")
    assert again.exit_code == 0 and "replacing your fix" in flat(again.output), again.output
    assert git(catalog, "status", "--porcelain") == ""
    assert not (catalog / writer.STAGE_DIR).exists()  # the staging area is gone again


# -- 8: fix names have a length limit, checked wherever a name is accepted ----------------------

def test_a_fix_name_too_long_is_refused_everywhere_with_the_limit(catalog: Path,
                                                                  tmp_path: Path) -> None:
    long = "x" * 300
    path = tmp_path / "long.mbox"
    path.write_bytes(mail().replace(b"The pool needs 22.", b"The pool.\n\nPatchkit-Fix: "
                                    + long.encode() + b" v1"))
    refused(catalog, ["import", "--mbox", str(path), "--release", "0.5.23"],
            "its Patchkit-Fix header", "300 characters long", "at most 100")
    refused(catalog, ["import", "--mbox", str(path), "--release", "0.5.23", "--name", long],
            "--name", "at most 100")
    refused(catalog, ["new", long, "--from", str(tmp_path)], "at most 100")
    for command in (["show", long], ["export", long, "--format", "mbox", "-o", str(tmp_path)]):
        refused(catalog, command, "300 characters long", "at most 100")
    manifest = catalog / "manifests" / "ok.toml"
    made = patchkit(catalog, "import", "--mbox", str(tmp_path / "long.mbox"), "--release",
                    "0.5.23", "--name", "x" * 100)  # the limit itself is a name
    assert made.exit_code == 0, made.output
    assert not manifest.exists()


# -- 13: what a host said on stdout is quoted too --------------------------------------------

@pytest.mark.ssh
def test_a_host_that_refuses_on_stdout_is_quoted(sshd: SshServer, tmp_path: Path) -> None:
    """A login that prints its refusal on stdout and exits, as nologin does: here a key the
    test sshd forces to that command (authorized_keys ``command=``)."""
    key = sshd.new_key("nologin-key")
    line = ('command="echo This account is currently not available.; exit 1",no-pty '
            + key.with_suffix(".pub").read_text().strip() + "\n")
    authorized = sshd.workdir / "authorized_keys"
    if line not in authorized.read_text():
        with authorized.open("a") as fh:
            fh.write(line)
    case = patched(tmp_path)
    spec = SshSpec(sshd.host, sshd.user, sshd.port, tuple(sshd.ssh_options(identity=key)))
    with pytest.raises(errors.SessionFailed) as caught:
        api.status(Catalog(case.catalog_dir), RemoteTarget(spec, {"sglang": str(case.root)}, PY))
    assert "This account is currently not available." in caught.value.message, caught.value.message
    assert "(nothing)" not in caught.value.message
    assert caught.value.details["stdout"] == "This account is currently not available."


# -- 14: two inventory hosts that reach one tree ----------------------------------------------

@pytest.mark.ssh
def test_two_inventory_hosts_reaching_one_tree_are_refused_in_preflight(fleet,
                                                                       tmp_path: Path) -> None:
    from tests.fixtures.fleet_hosts import write_inventory
    from tests.test_fleet import SEED, hosts, snapshot, state_of
    from tests.test_fleet import patchkit as fleet_patchkit

    h1, h2 = fleet.node("h1"), fleet.node("h2")
    inventory = write_inventory(tmp_path / "same.yml", [h1.host, h2.host],
                                {"h1": fleet.host_vars(h1), "h2": fleet.host_vars(h1)},
                                python=fleet.python)  # h2 (another sshd) names h1's trees
    before = snapshot(h1)
    code, report = fleet_patchkit(fleet, "apply", *SEED, inventory=inventory)
    assert code == 16, report
    assert hosts(report) == {"h1": "untouched", "h2": "refused"}
    detail = next(h["detail"] for h in report["hosts"] if h["host"] == "h2")
    assert "reaches the same tree as h1" in detail and str(h1.sglang) in detail
    assert "nothing was written" in report["stopped"]
    assert snapshot(h1) == before and state_of(h1) == {}


# -- 1 and 2: export writes only files of its own, and merges an existing quilt series -----------

def exported(catalog: Path, out: Path, fmt: str, *fixes: str, code: int = 0) -> str:
    result = patchkit(catalog, "export", *(fixes or ("dsv4-bf16-sizing",)), "--format", fmt,
                      "-o", str(out))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    return flat(result.output)


@pytest.mark.parametrize("link", ["dsv4-bf16-sizing.mbox", "series", "dsv4-bf16-sizing",
                                  "dangling"])
def test_export_never_writes_through_a_symlink_in_its_output_directory(
        catalog: Path, tmp_path: Path, link: str) -> None:
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "precious").write_text("precious\n")
    fmt = "mbox" if link.endswith(".mbox") or link == "dangling" else "quilt"
    name = "dsv4-bf16-sizing.mbox" if link == "dangling" else link
    target = (tmp_path / "missing" / "dir" / "x") if link == "dangling" else (
        victim if link == "dsv4-bf16-sizing" else victim / "precious")
    (out / name).symlink_to(target)
    before = digest(victim)
    said = exported(catalog, out, fmt, code=EXIT_USAGE)
    assert f"{out / name} is a symlink" in said and "never through a link" in said, said
    assert digest(victim) == before and not (tmp_path / "missing").exists()
    assert sorted(os.listdir(out)) == [name]  # nothing else written either


def test_export_quilt_merges_an_existing_series_and_drops_only_its_own_stale_patches(
        catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "patches"
    out.mkdir()
    (out / "series").write_text("upstream/keep-1.patch\n# a comment\ndsv4-bf16-sizing/0009-old"
                                ".patch\nupstream/keep-2.patch -p1\n")
    (out / "dsv4-bf16-sizing").mkdir()
    (out / "dsv4-bf16-sizing" / "0009-old.patch").write_text("stale\n")
    (out / "dsv4-bf16-sizing" / "notes.txt").write_text("mine\n")
    said = exported(catalog, out, "quilt")
    assert "merged into the existing" in said and "3 other line(s) kept" in said, said
    assert "removed the patch file(s)" in said and "0009-old.patch" in said
    shipped = Catalog.open(catalog).get("dsv4-bf16-sizing")
    assert (out / "series").read_text() == (
        "upstream/keep-1.patch\n# a comment\n"
        + "".join(f"dsv4-bf16-sizing/{p.file}\n" for p in shipped.patches)
        + "upstream/keep-2.patch -p1\n")
    assert not (out / "dsv4-bf16-sizing" / "0009-old.patch").exists()
    assert (out / "dsv4-bf16-sizing" / "notes.txt").read_text() == "mine\n"
    again = exported(catalog, out, "quilt")  # exporting again changes nothing
    assert "1 line(s) of dsv4-bf16-sizing replaced by 1" in again or "replaced by" in again
    assert (out / "series").read_text().count("dsv4-bf16-sizing/") == len(shipped.patches)


# -- 5: FIFOs, devices and oversized files are refused, not read ---------------------------------

def test_import_of_a_fifo_or_dev_zero_is_refused_at_once(catalog: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.mbox"
    os.mkfifo(fifo)
    refused(catalog, ["import", "--mbox", str(fifo), "--release", "0.5.23"], str(fifo),
            "is a FIFO (named pipe), not a regular file")
    zero = tmp_path / "zero.mbox"
    zero.symlink_to("/dev/zero")
    refused(catalog, ["import", "--mbox", str(zero), "--release", "0.5.23"], str(zero),
            "is a character device, not a regular file")
    quilt_dir = tmp_path / "quilt"
    quilt_dir.mkdir()
    (quilt_dir / "series").write_text("one.patch\n")
    os.mkfifo(quilt_dir / "one.patch")
    refused(catalog, ["import", "--quilt", str(quilt_dir), "--release", "0.5.23"],
            "one.patch: the patch is a FIFO")


def test_a_patch_file_that_is_a_fifo_is_refused_as_what_it_is(tmp_path: Path) -> None:
    case = Case(tmp_path)
    os.mkfifo(case.catalog_dir / "patches" / "h" / "0001-h.patch")
    with pytest.raises(errors.ManifestError) as info:
        Catalog(case.catalog_dir).get("h")
    assert "is a FIFO (named pipe), not a regular file" in info.value.message
    assert "does not exist" not in info.value.message


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_record_that_is_a_fifo_or_dev_zero_is_refused_by_apply(tmp_path: Path,
                                                                 kind: str) -> None:
    """An installed sglang (site-packages layout) whose dist-info RECORD is not a file."""
    site = tmp_path / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "version.py").write_text('__version__ = "0.5.23"\n')
    info = site / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: sglang\nVersion: 0.5.23\n")
    if kind == "fifo":
        os.mkfifo(info / "RECORD")
    else:
        (info / "RECORD").symlink_to("/dev/zero")
    case = patched(tmp_path)
    result = subprocess.run([PY, "-m", "patchkit", "--catalog", str(case.catalog_dir), "status",
                             "--target", str(site)], capture_output=True, text=True, timeout=120)
    assert result.returncode == EXIT_TARGET, result.stdout + result.stderr
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert f"RECORD is {what}, not a regular file" in result.stderr, result.stderr
    assert "Reinstall the package" in result.stderr


def test_export_then_import_carries_the_base_release_and_the_fix_root(catalog: Path,
                                                                      tmp_path: Path) -> None:
    (tmp_path / "one.mbox").write_bytes(mail())
    made = patchkit(catalog, "import", "--mbox", str(tmp_path / "one.mbox"), "--release",
                    "0.5.21", "--name", "served", "--root", "serve")
    assert made.exit_code == 0, made.output
    # a fix that patches no sglang root is the fix of its patches' root (docs/interop.md)
    assert Catalog(catalog).get("served").upstream.root == "serve"
    out = tmp_path / "out"
    for fmt in ("mbox", "quilt"):
        assert patchkit(catalog, "export", "served", "--format", fmt, "-o",
                        str(out / fmt)).exit_code == 0
        other = tmp_path / f"other-{fmt}"
        assert patchkit(other, "init", str(other)).exit_code == 0
        source = ["--mbox", str(out / fmt / "served.mbox")] if fmt == "mbox" else [
            "--quilt", str(out / fmt)]
        back = patchkit(other, "import", *source)  # no --release: the export says it
        assert back.exit_code == 0, back.output
        fix = Catalog(other).get("served")
        assert fix.upstream.base_release == "0.5.21", fmt
        assert fix.upstream.root == "serve", fmt
        assert [p.root for p in fix.patches] == ["serve"], fmt


def test_a_target_file_that_is_a_fifo_is_refused_not_read(tmp_path: Path) -> None:
    case = patched(tmp_path)
    (case.root / MOD).unlink()
    os.mkfifo(case.root / MOD)
    result = subprocess.run([PY, "-m", "patchkit", "--catalog", str(case.catalog_dir), "apply",
                             "h", "--target", str(case.root)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == errors.PreconditionFailed.exit_code, result.stderr
    assert "is a FIFO (named pipe), not a regular file" in result.stderr, result.stderr
    assert not (case.root / ".patchkit").exists()

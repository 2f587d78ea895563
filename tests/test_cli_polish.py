"""The rough edges a new user hits in the first day (issue 25, items 6-15), through the real
entry point (``python -m patchkit``): exit codes and output as a user sees them in a pipe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.upstream import UpstreamRepo
from tests.fixtures.user_catalog import app_patch, app_tree, user_catalog

REPO = Path(__file__).resolve().parent.parent


def shipped_version(name: str) -> int:
    """The version of a shipped fix (they move with every rebase of the shipped catalog)."""
    return Catalog(REPO).get(name).version


def pk(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, **(env or {})), stdin=subprocess.DEVNULL)


# -- 6: progress off a terminal ----------------------------------------------------------------


def test_plain_progress_names_each_step_still_running_on_stderr(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from patchkit.cli import render

    monkeypatch.setenv("PATCHKIT_PROGRESS_AFTER", "0")
    with render.busy("building the fork") as progress:
        progress.update("checking out SGLang 0.5.23\n(a second line)")
    with render.busy("quiet", quiet=True) as progress:
        progress.update("never said")
    assert capsys.readouterr().err.splitlines() == [
        "patchkit: building the fork", "patchkit: checking out SGLang 0.5.23 (a second line)"]
    monkeypatch.setenv("PATCHKIT_PROGRESS_AFTER", "off")
    with render.busy("building the fork") as progress:
        progress.update("a step")
    assert capsys.readouterr().err == ""


@pytest.mark.network
def test_upstream_fetch_in_a_pipe_says_what_it_does(upstream_repo: UpstreamRepo) -> None:
    run = pk("upstream", "fetch", "0.5.21", env={"PATCHKIT_UPSTREAM": str(upstream_repo.path),
                                                  "PATCHKIT_PROGRESS_AFTER": "0"})
    assert run.returncode == 0, run.stderr
    assert "patchkit: 0.5.21: sglang 0.5.21 already in the upstream repository" in run.stderr
    assert run.stdout.startswith("v0.5.21 ")


@pytest.mark.network
def test_matrix_and_upstream_check_progress_goes_through_the_one_mechanism(
        upstream_repo: UpstreamRepo) -> None:
    """Their steps are `patchkit: STEP` lines, and none with PATCHKIT_PROGRESS_AFTER=off."""
    where = {"PATCHKIT_UPSTREAM": str(upstream_repo.path)}
    # the fix based on 0.5.21: nothing more is fetched into the session's repository
    runs = {"matrix": ("--catalog", str(REPO), "matrix", "prefill-hicache-off", "--releases",
                       "0.5.21"),
            "upstream check": ("--catalog", str(REPO), "upstream", "check", "prefill-hicache-off",
                               "--release", "0.5.21")}
    for what, args in runs.items():
        every = pk(*args, env={**where, "PATCHKIT_PROGRESS_AFTER": "0"})
        assert every.returncode in (0, 1), (what, every.stderr)
        lines = every.stderr.splitlines()
        assert lines and all(ln.startswith("patchkit: ") for ln in lines), (what, lines)
        off = pk(*args, env={**where, "PATCHKIT_PROGRESS_AFTER": "off"})
        assert (off.returncode, off.stderr) == (every.returncode, ""), what
    assert "patchkit: sglang 0.5.21 already in the upstream repository" in pk(
        *runs["matrix"], env={**where, "PATCHKIT_PROGRESS_AFTER": "0"}).stderr
    assert upstream_repo.versions() == ["0.5.21"]  # the session's repository as it was


# -- 8, 9, 11: one real 0.5.23 checkout with a fix applied --------------------------------------


@pytest.mark.network
def test_a_checkout_found_from_the_working_directory(catalog_tree: Path) -> None:
    tree = catalog_tree
    cat = ["--catalog", str(REPO)]
    applied = pk(*cat, "apply", "dsv4-bf16-index-k", "--json", cwd=tree)
    assert applied.returncode == 0, applied.stderr
    # 11: the release the precondition read is the summary's, on a checkout too
    assert json.loads(applied.stdout)["summary"]["sglang"] == "0.5.23"

    # 8: log reads the target found from the working directory, as status does
    log = pk(*cat, "log", "dsv4-bf16-index-k", cwd=tree)
    assert log.returncode == 0, log.stderr
    version = json.loads(applied.stdout)["summary"]["fixes"]["dsv4-bf16-index-k"]
    assert f"applied v{version} since" in log.stdout and f"applied on sglang={tree}" in log.stdout
    # 8: verify without a name verifies every applied fix
    verify = pk(*cat, "verify", "--json", cwd=tree)
    assert verify.returncode == 0, verify.stderr
    assert [(f["name"], f["outcome"]) for f in json.loads(verify.stdout)["fixes"]] == [
        ("dsv4-bf16-index-k", "verified")]

    # 9: rollback of a fix that is not applied converges: exit 0, nothing to do, nothing written
    before = (tree / ".patchkit" / "state.json").read_bytes()
    again = pk(*cat, "rollback", "dsv4-bf16-sizing", cwd=tree)
    assert again.returncode == 0, again.stderr
    assert f"not-applied dsv4-bf16-sizing v{shipped_version('dsv4-bf16-sizing')}" in again.stdout and "nothing to roll back" in again.stdout
    assert (tree / ".patchkit" / "state.json").read_bytes() == before
    both = pk(*cat, "rollback", "dsv4-bf16-sizing", "dsv4-bf16-index-k", "--json", cwd=tree)
    assert both.returncode == 0, both.stderr
    assert [f["outcome"] for f in json.loads(both.stdout)["fixes"]] == ["not-applied", "rolled-back"]
    nothing = pk(*cat, "verify", cwd=tree)
    assert nothing.returncode == 0 and "no fix applied" in nothing.stderr, nothing.stderr

    # 11: status --all names the fixes it leaves out for a root not given
    status = pk(*cat, "status", "--all", cwd=tree)
    assert status.returncode == 0, status.stderr
    assert "prefill-hicache-off: root serve not given" in status.stderr


# -- 10: a broken manifest is an error row, the others go on ------------------------------------


def broken_catalog(tmp_path: Path, *init: str) -> tuple[Path, int]:
    """A user catalog beside the shipped one with two manifests that cannot be read: ``mine``
    (``version = "two"``, at the returned line) and ``torn`` (a TOML error at line 3)."""
    catalog = tmp_path / "catalog"
    assert pk("init", str(catalog), *init).returncode == 0
    mine = (REPO / "manifests" / "dsv4-bf16-sizing.toml").read_text()
    mine = mine.replace('name = "dsv4-bf16-sizing"', 'name = "mine"').replace(
        "depends_on = [", "depends_on = [] #")
    top = f"version = {shipped_version('dsv4-bf16-sizing')}"
    (catalog / "manifests" / "mine.toml").write_text(mine.replace(f"\n{top}\n", '\nversion = "two"\n', 1))
    (catalog / "manifests" / "torn.toml").write_text('format = 1\nname = "torn"\ntitle = \n')
    return catalog, mine.splitlines().index(top) + 1


def test_a_broken_manifest_is_an_error_row_naming_file_and_line(tmp_path: Path) -> None:
    catalog, line = broken_catalog(tmp_path, "--no-git")
    cat = ["--catalog", str(catalog)]

    listed = pk(*cat, "list")
    assert listed.returncode == 0, listed.stderr
    rows = {r.split("\t")[0]: r.split("\t") for r in listed.stdout.splitlines()}
    assert rows["mine"][2] == "error"
    assert rows["mine"][4].startswith(f"{catalog / 'manifests' / 'mine.toml'}:{line}: 'version'")
    assert rows["torn"][4].startswith(f"{catalog / 'manifests' / 'torn.toml'}:3:")
    assert rows["dsv4-bf16-index-k"][1] == f"v{shipped_version('dsv4-bf16-index-k')}"  # the shipped fixes beside it go on
    assert "2 manifest(s) could not be read" in listed.stderr
    data = json.loads(pk(*cat, "list", "--json").stdout)
    errors = {d["name"]: d["error"] for d in data if d.get("status") == "error"}
    assert errors["mine"]["line"] == line and errors["torn"]["line"] == 3

    tree = tmp_path / "sglang"
    (tree / "python" / "sglang").mkdir(parents=True)
    (tree / "python" / "sglang" / "__init__.py").write_text("")
    (tree / "python" / "sglang" / "_version.py").write_text('__version__ = "0.5.23"\n')
    status = pk(*cat, "status", "--all", "--target", str(tree))
    assert status.returncode == 0, status.stderr
    rows = {r.split("\t")[0]: r.split("\t") for r in status.stdout.splitlines()}
    assert rows["mine"][1] == "error" and f"mine.toml:{line}:" in rows["mine"][4]
    assert rows["dsv4-bf16-index-k"][1] == "not-applied"
    assert pk(*cat, "status", "--target", str(tree), "--exit-code").returncode == 1
    assert json.loads(pk(*cat, "status", "--target", str(tree), "--json").stdout)["broken"]


def test_log_shows_a_broken_manifest_as_an_error_line_and_gives_every_other_lineage(
        tmp_path: Path) -> None:
    catalog, line = broken_catalog(tmp_path)  # in git: the history of the others is read too
    cat = ["--catalog", str(catalog)]
    mine, torn = catalog / "manifests" / "mine.toml", catalog / "manifests" / "torn.toml"

    log = pk(*cat, "log")
    assert log.returncode == 0, log.stderr  # as list and status (without --exit-code)
    lines = log.stdout.splitlines()
    assert f"── mine  error  {mine}:{line}: 'version' must be an integer" in log.stdout
    assert lines[-1].startswith(f"└── torn  error  {torn}:3: not valid TOML"), log.stdout
    for name in ("dsv4-bf16-index-k", "hicache-index-k-sync", "dsv4-bf16-sizing"):
        assert any(f"  {name}  v{shipped_version(name)}  " in t for t in lines), log.stdout
    assert f"2 manifest(s) could not be read (their rows say why): {mine}:{line}, {torn}:3" \
        in log.stderr

    data = json.loads(pk(*cat, "log", "--json").stdout)
    assert {f["name"] for f in data["fixes"]} >= {"dsv4-bf16-index-k", "dsv4-bf16-sizing"}
    assert [(b["name"], b["status"], b["error"]["file"], b["error"]["line"]) for b in data["broken"]] \
        == [("mine", "error", str(mine), line), ("torn", "error", str(torn), 3)]
    # one fix's lineage still works; asking for the broken one is its error, naming file and line
    assert pk(*cat, "log", "dsv4-bf16-sizing").returncode == 0
    asked = pk(*cat, "log", "mine")
    assert asked.returncode == 2 and f"error: {mine}:{line}: 'version'" in asked.stderr, asked.stderr


def test_piped_list_and_status_give_a_broken_fix_its_row_in_name_order(tmp_path: Path) -> None:
    """Piped, `list` printed the rows of fixes whose manifest cannot be read after every other
    row (and `status` too): one row a fix, sorted by name, whether it reads or not, so a
    script reading the rows in order sees the catalog's order, as on a terminal."""
    catalog = user_catalog(tmp_path / "catalog", {name: (app_patch(), "")
                                                  for name in ("alpha", "lima", "zulu")})
    manifest = catalog / "manifests" / "lima.toml"
    manifest.write_text(manifest.read_text().replace("version = 1\n", 'version = "two"\n', 1))
    cat = ["--catalog", str(catalog)]

    listed = pk(*cat, "list")
    assert listed.returncode == 0, listed.stderr
    rows = [r.split("\t") for r in listed.stdout.splitlines()]
    names = [r[0] for r in rows]
    assert {"alpha", "lima", "zulu", "dsv4-bf16-sizing"} <= set(names)  # the shipped ones beside
    assert names == sorted(names), listed.stdout
    assert rows[names.index("lima")][2] == "error"
    assert "1 manifest(s) could not be read" in listed.stderr  # the count: on stderr, as before
    data = json.loads(pk(*cat, "list", "--json").stdout)
    assert [d["name"] for d in data] == names  # the same order in --json
    assert data[names.index("lima")]["status"] == "error"

    tree = app_tree(tmp_path / "tree")
    status = pk(*cat, "status", "--all", "--root", f"tree={tree}")
    assert status.returncode == 0, status.stderr
    assert [(r.split("\t")[0], r.split("\t")[1]) for r in status.stdout.splitlines()] == [
        ("alpha", "not-applied"), ("lima", "error"), ("zulu", "not-applied")], status.stdout

    # applied before its manifest broke: still its row in name order (it came after every
    # other row), and --json's row, which keeps what the target records, says the error too
    good = manifest.read_text().replace('version = "two"\n', "version = 1\n", 1)
    broken, _ = manifest.read_text(), manifest.write_text(good)
    assert pk(*cat, "apply", "lima", "--root", f"tree={tree}").returncode == 0
    manifest.write_text(broken)
    status = pk(*cat, "status", "--all", "--root", f"tree={tree}")
    assert [r.split("\t")[:2] for r in status.stdout.splitlines()] == [  # the same patch
        ["alpha", "present-unrecorded"], ["lima", "error"], ["zulu", "present-unrecorded"]], status.stdout
    rows = {r["name"]: r for r in json.loads(pk(*cat, "status", "--all", "--json", "--root",
                                                f"tree={tree}").stdout)["status"]["fixes"]}
    assert rows["lima"]["state"] == "applied" and "lima.toml" in rows["lima"]["error"], rows["lima"]


# -- a dry-run rebase of the shipped catalog needs no catalog of the user's --------------------


@pytest.mark.network
def test_a_dry_run_rebase_of_the_shipped_catalog_writes_nowhere_in_it(
        three_releases: UpstreamRepo, tmp_path: Path) -> None:
    """From a directory with no catalog (a fresh clone's user), the shipped catalog is the
    catalog: a dry run reports without writing its state there; a real run is refused
    saying why and that the dry run works. (Onto 0.5.21, a backport: each fix starts from
    its 0.5.22 variant, so the release store holds 0.5.22 too.)"""
    env = {"PATCHKIT_UPSTREAM": str(three_releases.path)}
    tracked = ["git", "status", "--porcelain", "--ignored", "--", "manifests", "patches"]
    before = subprocess.run(tracked, cwd=REPO, capture_output=True, text=True).stdout
    dry = pk("rebase", "--all", "--onto", "0.5.21", "--dry-run", cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    rows = {r.split("\t")[0]: r.split("\t") for r in dry.stdout.splitlines() if "\t" in r}
    assert rows["dsv4-bf16-index-k"][3] == "offset" and rows["dsv4-bf16-sizing"][1] == \
        f"v3 -> v{shipped_version('dsv4-bf16-sizing') + 1}", dry.stdout
    assert rows["revert-hicache-index-k-sync"][3] == "conflict", dry.stdout
    assert "nothing was written (--dry-run)" in dry.stdout
    assert not (REPO / ".patchkit-rebase").exists()
    assert subprocess.run(tracked, cwd=REPO, capture_output=True, text=True).stdout == before

    real = pk("rebase", "--all", "--onto", "0.5.21", cwd=tmp_path, env=env)
    assert real.returncode == 2
    assert "is never written to (`patchkit rebase --dry-run` writes nothing" in real.stderr, \
        real.stderr
    assert "pass --catalog DIR" in real.stderr and not (REPO / ".patchkit-rebase").exists()


# -- 12: a fix left unfinished by `new` is said so ----------------------------------------------


def test_new_list_and_export_warn_of_a_placeholder_rationale_and_no_verification(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    assert pk("init", str(catalog)).returncode == 0
    src = tmp_path / "src"
    (src / "python" / "sglang").mkdir(parents=True)
    (src / "python" / "sglang" / "x.py").write_text("one = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=src, check=True)
    subprocess.run(["git", "add", "."], cwd=src, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=src, check=True)
    (src / "python" / "sglang" / "x.py").write_text("one = 11\n")
    cat = ["--catalog", str(catalog)]

    made = pk(*cat, "new", "myfix", "--from", str(src), "--base-release", "0.5.23")
    assert made.returncode == 0, made.stderr
    warned = [line for line in made.stderr.splitlines() if line.startswith("warning: myfix: ")]
    assert len(warned) == 2, made.stderr
    assert "placeholder" in warned[0] and "no [[verification]]" in warned[1]
    listed = pk(*cat, "list")
    assert listed.returncode == 0
    assert sum(line.startswith("warning: myfix: ") for line in listed.stderr.splitlines()) == 2
    assert not any("dsv4" in line for line in listed.stderr.splitlines())  # finished fixes: quiet
    data = {f["name"]: f for f in json.loads(pk(*cat, "list", "--json").stdout)}
    assert len(data["myfix"]["warnings"]) == 2 and data["dsv4-bf16-sizing"]["warnings"] == []
    exported = pk(*cat, "export", "myfix", "--format", "mbox", "-o", str(tmp_path / "out"))
    assert exported.returncode == 0, exported.stderr
    assert "warning: myfix: its rationale is still the placeholder" in exported.stderr

    written = pk(*cat, "new", "second", "--from", str(src), "--base-release", "0.5.23",
                 "--rationale", "x.py said one; it is eleven (issue 1).")
    assert written.returncode == 0
    assert [line for line in written.stderr.splitlines() if "placeholder" in line] == []


# -- 15: help and options -----------------------------------------------------------------------


def test_ssh_options_in_patchkit_toml_take_the_form_ssh_option_takes(tmp_path: Path) -> None:
    from patchkit.catalog.config import load_config
    from patchkit.errors import ManifestError
    from patchkit.targets import resolve_target

    config = tmp_path / "patchkit.toml"
    config.write_text('[targets.gpu]\nhost = "gpu1"\npath = "/srv"\n'
                      'ssh_options = ["ProxyJump=bastion", "IdentityFile ~/.ssh/k"]\n')
    named = resolve_target("gpu", (), config=load_config(config))
    assert named.spec.options == ("-o", "ProxyJump=bastion", "-o", "IdentityFile ~/.ssh/k")
    config.write_text('[targets.gpu]\nhost = "gpu1"\npath = "/srv"\nssh_options = ["-i", "/k"]\n')
    with pytest.raises(ManifestError) as raw:
        load_config(config)
    assert str(config) in raw.value.message and "IdentityFile=" in raw.value.message


def test_help_is_whole_and_says_what_each_option_does() -> None:
    import click

    from patchkit.cli.main import COMMAND_MODULES, cli

    top = pk("--help")
    assert top.returncode == 0
    listed = top.stdout.split("Commands:")[1].replace("FIX...", "FIX")
    assert "..." not in listed, top.stdout
    ctx = click.Context(cli)
    writers = []
    for name in COMMAND_MODULES:
        cmd = cli.get_command(ctx, name)
        commands = ([cmd.get_command(ctx, sub) for sub in cmd.list_commands(ctx)]
                    if isinstance(cmd, click.Group) else [cmd])
        for c in commands:
            opts = {o: p for p in c.params for o in getattr(p, "opts", ())}
            if "--dry-run" in opts:
                assert "-n" in opts["--dry-run"].opts, c.name  # every dry run is -n too
                writers.append(c.name if c is cmd else f"{name} {c.name}")
            if "--python" in opts:
                assert "verify with" not in (opts["--python"].help or ""), c.name
    readme = " ".join((REPO / "README.md").read_text().split())
    said = readme[readme.index("`--dry-run` (`-n`)"):][:300]
    for name in writers:
        assert f"`{name.replace('upstream check', 'upstream check --mark')}`" in said, (name, said)
    assert "seed" not in top.stdout and "seed" not in pk("demo", "--help").stdout  # item 14
    rebase = pk("rebase", "--help").stdout
    assert "(0.5.23)" not in rebase and "no default" in " ".join(rebase.split())


def test_catalog_may_follow_the_command(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    assert pk("init", str(catalog), "--no-git").returncode == 0
    (catalog / "patchkit.toml").write_text("shipped_fixes = false\n")
    after = pk("list", "--catalog", str(catalog), "--json")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout) == []
    both = pk("--catalog", str(REPO), "list", "--catalog", str(catalog), "--json")
    assert json.loads(both.stdout) == []  # the one after the command wins


# -- docs/fixes.md says what the shipped catalog serves -------------------------------------------


def test_the_supported_releases_table_of_docs_fixes_is_the_catalogs() -> None:
    """Each fix's version per release in docs/fixes.md, "Supported releases", is the variant
    the catalog serves that release with (issue 25: the table still said 0.5.21 v1 / 0.5.23 v2)."""
    import re

    lines = (REPO / "docs" / "fixes.md").read_text().split("## Supported releases", 1)[1].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| fix "))
    header, table = lines[start], lines[start + 2:]
    rows = [ln.split("|")[1:-1] for ln in table[:next(i for i, ln in enumerate(table)
                                                       if not ln.startswith("|"))]]
    releases = [c.strip() for c in header.split("|")[2:-1]]
    assert releases[-2:] == ["0.5.22", "0.5.23"], header
    catalog = Catalog(REPO)
    seen = {}
    for cells in rows:
        fix = catalog.get(cells[0].split()[0].strip())
        served = {r: v.version for v in fix.variants for r in v.releases}
        served.update(dict.fromkeys(fix.upstream.releases, fix.version))
        for release, cell in zip(releases[-2:], cells[-2:]):
            shown = re.match(r"\s*v(\d+)", cell)
            assert shown, (fix.name, release, cell)
            seen[(fix.name, release)] = int(shown.group(1))
            assert int(shown.group(1)) == served.get(release, fix.version), (fix.name, release)
    assert {name for name, _ in seen} == set(catalog.names())


def test_every_json_error_names_the_command_and_the_target(tmp_path: Path) -> None:
    """A script reading `--json` learns which op failed, on which target, however early the
    failure: a target that is not one, a fix the catalog lacks, a usage error; as an engine
    result carries them (it used to be ``ok`` and ``error`` only before the engine)."""
    missing = tmp_path / "nowhere"
    cases = [(("status", "--target", str(missing), "--json"), "status", str(missing), 5),
             (("apply", "no-such-fix", "--target", str(tmp_path), "--json"), "apply",
              str(tmp_path), 5),
             (("rollback", "--target", str(tmp_path), "--lock-timeout", "-1", "--json"),
              "rollback", str(tmp_path), 2),
             (("show", "no-such-fix", "--json"), "show", None, 2),
             # the refused option before --target
             (("rollback", "--lock-timeout", "-1", "--target", str(tmp_path), "--json"),
              "rollback", str(tmp_path), 2),
             # an option click does not know: the line is refused before --target is read
             (("apply", "x", "--target", str(missing), "--bogus", "--json"), "apply", str(missing), 2),
             (("apply", "x", f"--target={missing}", "--bogus", "--json"), "apply", str(missing), 2),
             # --json before the command, which click refuses before reading the command
             (("--json", "apply", "x", "--target", str(missing)), "apply", str(missing), 2),
             (("--json", "upstream", "checkout", "0.5.21", str(missing)), "upstream checkout",
              None, 2),
             # two targets: none is the target of the run
             (("status", "--target", str(missing), "--target", str(tmp_path), "--json"),
              "status", None, 2)]
    for argv, op, target, code in cases:
        run = pk(*argv)
        assert run.returncode == code, (argv, run.stdout, run.stderr)
        data = json.loads(run.stdout)
        assert data["ok"] is False and data["error"]["message"], argv
        assert (data["op"], data["target"]) == (op, target), argv


@pytest.mark.network
def test_matrix_takes_tag_spellings_and_fails_on_a_missing_release_before_checking(
        upstream_repo: UpstreamRepo) -> None:
    """`v0.5.21` is 0.5.21, as `rebase --onto` takes it; a release that does not exist is
    found before any fix is checked on the ones that do (it used to be found only when the
    matrix reached it, after the others' work)."""
    from patchkit.matrix import parse_releases

    assert parse_releases("v0.5.21..v0.5.23", ["0.5.22"]) == ["0.5.21", "0.5.22", "0.5.23"]
    assert parse_releases("v0.5.22,0.5.22", []) == ["0.5.22"]
    where = {"PATCHKIT_UPSTREAM": str(upstream_repo.path), "PATCHKIT_PROGRESS_AFTER": "0"}
    tagged = pk("--catalog", str(REPO), "matrix", "prefill-hicache-off", "--releases",
                "v0.5.21", "--json", env=where)
    assert tagged.returncode == 0, tagged.stderr
    assert json.loads(tagged.stdout)["releases"] == ["0.5.21"]
    missing = pk("--catalog", str(REPO), "matrix", "prefill-hicache-off", "--releases",
                 "0.5.21,0.0.999", env=where)
    assert missing.returncode != 0 and "0.0.999" in missing.stderr, missing.stderr
    assert "checking the fixes" not in missing.stderr
    assert upstream_repo.versions() == ["0.5.21"]


@pytest.mark.network
def test_a_group_commands_json_error_names_it(tmp_path: Path) -> None:
    """`upstream checkout` (a command of a group) fails after it ran: its name is kept."""
    run = pk("upstream", "checkout", "0.0.999", str(tmp_path / "x"), "--json",
             env={"PATCHKIT_UPSTREAM": str(tmp_path / "store")})
    assert run.returncode == 2, (run.stdout, run.stderr)
    data = json.loads(run.stdout)
    assert (data["op"], data["target"], data["ok"]) == ("upstream checkout", None, False)


def test_a_series_changed_without_a_version_bump_is_refused_by_apply_and_verify(
        tmp_path: Path) -> None:
    """The catalog's v1 patch edited in place after a host applied v1 (a reviewer's fix-up,
    committed without a bump): apply and sync said already-applied and verify passed, while
    the host runs another change than the catalog's v1 and its record names the patch's old
    sha256. apply, sync and verify now refuse (exit 1), naming the patch and the way out,
    the tree untouched; bumping the version then upgrades the host."""
    from tests.fixtures.user_catalog import tree_digest

    catalog = user_catalog(tmp_path / "catalog", {"mark": (app_patch(), "")})
    tree = app_tree(tmp_path / "tree")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "mark", *where).returncode == 0
    patch = catalog / "patches" / "mark" / "0001-mark.patch"
    patch.write_text(app_patch("value = 3"))
    before = tree_digest(tree)
    for args in (["apply", "mark"], ["sync"], ["verify", "mark"]):
        run = pk(*cat, *args, *where)
        assert run.returncode == 1, (args, run.stdout, run.stderr)
        assert "0001-mark.patch" in run.stderr and "without a version bump" in run.stderr, run.stderr
        assert "a version of its own" in run.stderr and "not patchkit refresh" in run.stderr
        assert tree_digest(tree) == before
    failed = json.loads(pk(*cat, "apply", "mark", *where, "--json").stdout)
    assert failed["error"]["details"]["patches"] == ["0001-mark.patch"], failed
    manifest = catalog / "manifests" / "mark.toml"
    manifest.write_text(manifest.read_text().replace("version = 1\n", "version = 2\n", 1))
    done = pk(*cat, "apply", "mark", *where, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fixes"][0]["outcome"] == "upgraded"
    assert (tree / "app.py").read_text().endswith("value = 3\n")


def test_an_interpreter_given_as_a_local_target_is_told_the_python_form(tmp_path: Path) -> None:
    """`--target VENV/bin/python` was refused as "not a directory" with no word of the
    `python:` form that takes an interpreter's installed sglang (an ssh:// target's venv
    root got that hint)."""
    import os

    run = pk("status", "--target", sys.executable, cwd=tmp_path)
    assert run.returncode == 5, run.stderr
    assert f"--target python:{os.path.abspath(sys.executable)}" in run.stderr, run.stderr


def test_sync_json_says_sync_on_success_and_on_failure(tmp_path: Path) -> None:
    """`sync --json` said `"op": "apply"` (the engine's op), on success and on an engine's
    error; only a usage error said sync (a new-user trial)."""
    catalog = user_catalog(tmp_path / "catalog", {"mark": (app_patch(), "")})
    tree = app_tree(tmp_path / "tree")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    done = pk(*cat, "sync", *where, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["op"] == "sync", done.stdout
    other = app_tree(tmp_path / "other")
    (other / "app.py").write_text('print("app")\nvalue = 7\n')  # the hunk's context is not there
    failed = pk(*cat, "sync", "--root", f"tree={other}", "--json")
    assert failed.returncode == 3 and json.loads(failed.stdout)["op"] == "sync", failed.stdout

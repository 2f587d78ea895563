"""`list` and `show` say which release each version of a fix serves: a catalog carries one
variant per release, and a fleet midway through an upgrade needs to see that before it acts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pk(catalog: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog), *args],
                          capture_output=True, text=True, cwd=catalog)


def variant_catalog(tmp_path: Path) -> Path:
    """A copy of the shipped catalog: dsv4-bf16-sizing keeps a version for each of two
    releases, prefill-hicache-off (the serve script) has no release precondition."""
    for part in ("manifests", "patches"):
        shutil.copytree(REPO / part, tmp_path / part)
    return tmp_path


def test_list_and_show_name_the_releases_each_version_serves(tmp_path: Path) -> None:
    catalog = variant_catalog(tmp_path)
    listed = pk(catalog, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    by_name = {f["name"]: f for f in json.loads(listed.stdout)}
    shown = json.loads(pk(catalog, "show", "dsv4-bf16-sizing", "--json").stdout)
    # what the manifest says, each release once, the version serving it
    expected = {r: shown["version"] for r in shown["upstream"]["releases"]}
    for variant in shown["variants"]:
        expected.update({r: variant["version"] for r in variant["releases"]})
    assert len(set(expected.values())) >= 2  # the case this is about: versions for two releases
    assert by_name["dsv4-bf16-sizing"]["serves"] == expected == shown["serves"]
    serve_only = by_name["prefill-hicache-off"]
    assert serve_only["serves"] == {}  # no release precondition: any release

    plain = {row.split("\t")[0]: row.split("\t") for row in pk(catalog, "list").stdout.splitlines()}
    cell = plain["dsv4-bf16-sizing"][3]
    for release, version in expected.items():
        assert f"{release} (v{version})" in cell, cell
    assert plain["prefill-hicache-off"][3] == "any"

    text = pk(catalog, "show", "dsv4-bf16-sizing").stdout
    old = shown["variants"][0]
    assert (f"Variant: v{old['version']} serves {', '.join(old['releases'])}: "
            f"{old['patches'][0]['file']}") in text, text


def test_log_json_has_one_shape_whether_or_not_a_manifest_is_broken(tmp_path: Path) -> None:
    """A script reads `broken` from every `log --json` as from `status --json`, not only when a
    manifest cannot be read."""
    catalog = variant_catalog(tmp_path)
    assert json.loads(pk(catalog, "log", "--no-history", "--json").stdout)["broken"] == []
    (catalog / "manifests" / "torn.toml").write_text('name = "torn\n')
    broken = json.loads(pk(catalog, "log", "--no-history", "--json").stdout)["broken"]
    assert [b["name"] for b in broken] == ["torn"]


def test_a_narrow_terminal_folds_the_other_columns_never_a_fix_name(tmp_path: Path) -> None:
    """A fix's name is what a user copies into the next command: on a terminal too narrow for
    the table, the titles and releases fold, the names stay whole."""
    import os
    import re

    catalog = variant_catalog(tmp_path)
    names = [f["name"] for f in json.loads(pk(catalog, "list", "--json").stdout)]
    drawn = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog), "list"],
                           capture_output=True, text=True, cwd=catalog,
                           env=dict(os.environ, FORCE_COLOR="1", COLUMNS="60"))
    text = re.sub(r"\x1b\[[0-9;]*m", "", drawn.stdout)
    assert "\t" not in text and len(text.splitlines()) > len(names) + 1  # a table, folded
    firsts = [line.split()[0] for line in text.splitlines()[1:] if line.strip() and not line.startswith("  ")]
    assert [n for n in names if n not in firsts] == [], text


def test_a_fix_depending_on_a_broken_one_names_its_own_line_in_every_output(
        tmp_path: Path) -> None:
    """`list --json` gave the dependent fix's message as `FILE: depends on ...`, without the
    line its `line` key and the plain row name: a script printing the message lost it."""
    catalog = variant_catalog(tmp_path)
    index_k = catalog / "manifests" / "dsv4-bf16-index-k.toml"
    index_k.write_text(index_k.read_text().replace('title = "', "title = 12 #", 1))
    dependents = ["dsv4-bf16-sizing", "hicache-index-k-sync"]  # depends_on = [that one]
    listed = {f["name"]: f for f in json.loads(pk(catalog, "list", "--json").stdout)}
    plain = {r.split("\t")[0]: r.split("\t") for r in pk(catalog, "list").stdout.splitlines()}
    for name in dependents:
        error = listed[name]["error"]
        where = f"{error['file']}:{error['line']}"
        assert error["message"].startswith(where + ": depends on dsv4-bf16-index-k"), error
        assert plain[name][-1].startswith(where + ": "), plain[name]


def test_a_catalog_named_with_dots_is_printed_as_the_directory_it_is(tmp_path: Path) -> None:
    """`--catalog ./sub/..` and PATCHKIT_CATALOG=./sub/.. printed "the catalog ./sub/.." (and
    "." as "the catalog .."); patchkit.toml's catalog key already printed the directory."""
    import os

    catalog = variant_catalog(tmp_path)
    (catalog / "sub").mkdir()
    for args, env in ((["--catalog", "./sub/.."], {}), ([], {"PATCHKIT_CATALOG": "./sub/.."})):
        done = subprocess.run([sys.executable, "-m", "patchkit", *args, "show", "nope"],
                              capture_output=True, text=True, cwd=catalog,
                              env={**os.environ, **env})
        assert done.returncode == 2, done.stderr
        assert f"no fix named 'nope' in the catalog {catalog}." in done.stderr, done.stderr


def test_a_fix_depending_on_a_fix_not_in_the_catalog_is_an_error_row(tmp_path: Path) -> None:
    """`depends_on = ["no-such-fix"]`: apply and log refused it, while list and status showed
    the fix active, as if nothing were wrong. It is an error row in each, naming the key and
    the missing name, and the others are listed as ever."""
    catalog = variant_catalog(tmp_path)
    manifest = catalog / "manifests" / "prefill-hicache-off.toml"
    manifest.write_text(manifest.read_text().replace("depends_on = []", 'depends_on = ["no-such-fix"]', 1))
    assert 'depends_on = ["no-such-fix"]' in manifest.read_text()
    listed = pk(catalog, "list")
    assert listed.returncode == 0, listed.stderr
    rows = {r.split("\t")[0]: r.split("\t") for r in listed.stdout.splitlines()}
    assert rows["prefill-hicache-off"][2] == "error", listed.stdout
    assert "depends_on names 'no-such-fix', which is not in the catalog" in rows["prefill-hicache-off"][-1]
    assert rows["dsv4-bf16-sizing"][2] == "active"
    applied = pk(catalog, "apply", "prefill-hicache-off", "--root", f"serve={tmp_path}")
    assert applied.returncode == 2 and "no-such-fix" in applied.stderr


def test_show_of_a_revert_fix_says_what_it_reverts(tmp_path: Path) -> None:
    """`show` of a ``[revert]`` fix said nothing of the commit it reverts (a new-user trial):
    a fix naming only a commit id showed no trace of it. It says the commit, or the fix whose
    commit is found, and the root, as a line and as ``git_revert`` in JSON."""
    from tests.fixtures.user_catalog import app_patch, user_catalog

    catalog = user_catalog(tmp_path / "cat", {
        "dead": (app_patch(), ""),
        "undo-dead": (app_patch(), '\n[revert]\nfix = "dead"\n'),
        "undo-id": (app_patch(), '\n[revert]\ncommit = "1234abcd"\npaths = ["app.py"]\n'),
    })
    said = {
        "undo-dead": "the commit holding the series of dead (found by patch-id), in root tree",
        "undo-id": "commit 1234abcd, in root tree, only app.py",
    }
    for name, expected in said.items():
        shown = pk(catalog, "show", name)
        assert shown.returncode == 0, shown.stderr
        assert f"Git-Revert: {expected}\n" in shown.stdout, shown.stdout
        data = json.loads(pk(catalog, "show", name, "--json").stdout)
        assert data["git_revert"] == expected, data
    plain = pk(catalog, "show", "dead")
    assert "Git-Revert" not in plain.stdout
    assert json.loads(pk(catalog, "show", "dead", "--json").stdout)["git_revert"] is None


def test_show_folds_a_trailer_of_several_lines_as_git_does(tmp_path: Path) -> None:
    """A rollback note of several lines went on unindented after ``Rollback:``, so a trailer
    parser (``git interpret-trailers --parse``) lost all but its first line (a new-user
    trial): each further line of a trailer starts with a space, git's folding."""
    shown = pk(REPO, "show", "prefill-hicache-off")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = next(i for i, text in enumerate(lines) if text.startswith("Rollback: "))
    rest = lines[start + 1:]
    assert rest and all(text.startswith(" ") for text in rest), lines[start:]
    parsed = subprocess.run(["git", "interpret-trailers", "--parse"], input=shown.stdout,
                            capture_output=True, text=True, check=True).stdout
    rollback = next(t for t in parsed.splitlines() if t.startswith("Rollback: "))
    assert rollback.endswith("since the script is read at start."), parsed


def test_a_depends_on_cycle_made_by_hand_is_an_error_row_in_list_and_status_and_of_show(
        tmp_path: Path) -> None:
    """A trial made dsv4-bf16-index-k depend on dsv4-bf16-sizing, which depends on it: apply,
    sync and log refused (exit 2), but list, status --exit-code and show said nothing and
    exited 0, so a CI gate on them passed a catalog on which every apply failed."""
    catalog = variant_catalog(tmp_path / "cat")
    manifest = catalog / "manifests" / "dsv4-bf16-index-k.toml"
    manifest.write_text(manifest.read_text().replace(
        "depends_on = []", 'depends_on = ["dsv4-bf16-sizing"]', 1))
    listed = pk(catalog, "list", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    for name in ("dsv4-bf16-index-k", "dsv4-bf16-sizing"):
        assert rows[name]["status"] == "error", rows[name]
        assert "depends_on forms a cycle" in rows[name]["error"]["message"]
    assert rows["prefill-hicache-off"]["status"] == "active"  # the rest read
    tree = tmp_path / "tree"
    (tree / "python" / "sglang").mkdir(parents=True)  # an SGLang checkout's layout, no fix in it
    status = pk(catalog, "status", "--target", str(tree), "--exit-code")
    assert status.returncode == 1, status.stdout + status.stderr
    assert "depends_on forms a cycle" in status.stdout + status.stderr
    shown = pk(catalog, "show", "dsv4-bf16-sizing")
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "depends_on forms a cycle: dsv4-bf16-sizing -> dsv4-bf16-index-k" in shown.stderr
    assert str(manifest) in shown.stderr


def test_sync_refused_by_an_unreadable_manifest_says_why_it_needs_it_and_what_to_do(
        tmp_path: Path) -> None:
    """One broken manifest of a fix never applied on the target stopped every sync with the
    TOML error alone (a trial): nothing said that sync reads every fix of the catalog, nor
    what to do meanwhile. Still refused, writing nothing (a sync that left a fix out would
    leave hosts without it), now saying both."""
    catalog = variant_catalog(tmp_path / "cat")
    bad = catalog / "manifests" / "bad.toml"
    bad.write_text('format = 1\nname = "bad"\nversion = 1\n[[broken\n')
    tree = tmp_path / "tree"
    (tree / "python" / "sglang").mkdir(parents=True)
    done = pk(catalog, "sync", "--target", str(tree))
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert f"{bad}:4:9: not valid TOML" in said, said
    assert "sync converges the target to every fix of the catalog" in said
    assert "move it out of manifests/" in said and "patchkit apply FIX" in said
    assert list(tree.rglob("*")) == [tree / "python", tree / "python" / "sglang"]

"""Manifests and patchkit.toml: what loads, what is refused and how, and authoring edits."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from patchkit.errors import ManifestError
from patchkit.catalog.config import load_config
from patchkit.catalog.edit import bump_manifest, new_manifest_text
from patchkit.catalog.manifest import load_manifest
from patchkit.catalog.model import Check

SAMPLES = Path(__file__).parent / "samples"
CATALOG = SAMPLES / "catalog"
BAD = sorted((SAMPLES / "bad" / "manifests").glob("*.toml"))
BAD_CONFIGS = sorted((SAMPLES / "config").glob("bad-*.toml"))


def _expectations(path: Path) -> tuple[str, str, str]:
    """Each bad sample says in its first two comment lines what the error must name."""
    head = path.read_text().splitlines()[:2]
    expect = re.match(r"# expect: (.*)", head[0]).group(1)  # type: ignore[union-attr]
    field, value = re.match(r"# (key|line): (.*)", head[1]).groups()  # type: ignore[union-attr]
    return expect, field, value


def test_sample_manifest_loads_every_field() -> None:
    fix = load_manifest(CATALOG / "manifests" / "index-k-bytes.toml")
    assert (fix.name, fix.version, fix.status) == ("index-k-bytes", 2, "active")
    assert fix.upstream.releases == ("0.5.20", "0.5.21")
    assert fix.upstream.forwarding == "proposed"
    assert fix.patch_dir == CATALOG / "patches" / "index-k-bytes"
    assert fix.patches[0].path == fix.patch_dir / "0001-count-index-k-bytes.patch"
    assert fix.patches[0].description == "double the index-K term"
    grep = fix.preconditions[0]
    assert grep.kind == "grep" and grep.get("regex") is True and grep.get("count") == 1
    assert grep.name == "the unpatched index-K term is there once"
    # A TOML date and a quoted date both become ISO strings.
    assert [c.date for c in fix.changelog] == ["2026-01-10", "2026-02-01"]
    assert fix.rollback.notes.startswith("Restoring")
    assert fix.scripts == ("checks/bytes_per_token.py",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fix.version = 3  # type: ignore[misc]


def test_defaults_fill_what_a_manifest_leaves_out() -> None:
    fix = load_manifest(CATALOG / "manifests" / "pool-guard.toml")
    assert fix.upstream.releases == ("0.5.21",)  # default [base_release]
    assert fix.upstream.root == "sglang" and fix.upstream.project == "sglang"
    assert fix.upstream.forwarding == "not-forwarded"
    assert fix.actions.purge_pycache is True
    assert fix.patches[1].root == "serve"
    assert fix.roots == ("sglang", "serve")
    # The python-import check had no root: it gets the upstream root.
    assert fix.verification[1].to_request() == {"kind": "python-import", "root": "sglang",
                                                "module": "sglang.srt.pool", "timeout": 300.0}


def test_check_to_request_fills_engine_defaults() -> None:
    grep = Check("grep", {"root": "sglang", "path": "x.py", "pattern": "a", "present": True})
    assert grep.to_request() == {"kind": "grep", "root": "sglang", "path": "x.py",
                                 "pattern": "a", "present": True, "regex": False,
                                 "timeout": 60.0}
    command = Check("command", {"root": "sglang", "argv": ["{python}", "-V"]})
    request = command.to_request()
    assert request["argv"] == ["{python}", "-V"] and request["expect_exit"] == 0
    assert request["timeout"] == 300.0
    request["argv"].append("mutated")
    assert command.get("argv") == ("{python}", "-V")


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_manifest_is_refused_naming_file_and_key(path: Path) -> None:
    expect, field, value = _expectations(path)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    err = info.value
    assert str(path) in err.message
    assert expect in err.message
    assert err.details["file"] == str(path)
    if field == "key":
        assert err.details["key"] == value
        assert f"'{value}'" in err.message
    else:
        assert err.details["line"] == int(value)
        assert f"{path}:{value}:" in err.message


def test_unreadable_manifest_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such manifest file"):
        load_manifest(tmp_path / "manifests" / "absent.toml")
    raw = tmp_path / "manifests" / "latin.toml"
    raw.parent.mkdir()
    raw.write_bytes(b'title = "caf\xe9"\n')
    with pytest.raises(ManifestError, match="not UTF-8") as info:
        load_manifest(raw)
    assert info.value.details["file"] == str(raw)


def test_config_targets_local_and_remote() -> None:
    path = SAMPLES / "config" / "patchkit.toml"
    config = load_config(path)
    base = path.parent.resolve()
    # as messages print it: "catalog = '../catalog'" is the catalog beside, not "config/../catalog"
    assert config.catalog == base.parent / "catalog" and config.default_target == "dev"
    dev, gpu = config.targets["dev"], config.targets["gpu1"]
    assert not dev.is_remote and dev.path == str(base / "trees/sglang")
    assert dev.all_roots() == {"sglang": str(base / "trees/sglang"),
                               "serve": str(base / "trees/serve")}
    assert gpu.is_remote and gpu.host == "gpu1.example.com" and gpu.port == 2222
    assert gpu.path == "/opt/sglang" and gpu.user == "deploy"
    assert gpu.ssh_options == ("ConnectTimeout=5",) and gpu.ssh_program == "ssh"
    assert gpu.python == "/opt/venv/bin/python"
    assert gpu.roots == {"serve": "/etc/sglang-serve"}  # remote paths are the host's


@pytest.mark.parametrize("path", BAD_CONFIGS, ids=[p.stem for p in BAD_CONFIGS])
def test_bad_config_is_refused_naming_file_and_key(path: Path) -> None:
    expect, _, key = _expectations(path)
    with pytest.raises(ManifestError) as info:
        load_config(path)
    assert str(path) in info.value.message and expect in info.value.message
    assert info.value.details["key"] == key


def _patch(catalog: Path, name: str, file: str = "0001-a.patch") -> None:
    src = CATALOG / "patches" / "index-k-bytes" / "0001-count-index-k-bytes.patch"
    (catalog / "patches" / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(src, catalog / "patches" / name / file)


def test_new_manifest_text_loads_as_written(tmp_path: Path) -> None:
    text = new_manifest_text("dsv4-fix", 'Keep "quotes" in titles', "0.5.21",
                             [("0001-a.patch", "sglang"), ("0002-b.patch", "serve", "launcher")],
                             date="2026-03-01")
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "dsv4-fix.toml"
    path.write_text(text)
    _patch(tmp_path, "dsv4-fix")
    _patch(tmp_path, "dsv4-fix", "0002-b.patch")
    fix = load_manifest(path)
    assert fix.title == 'Keep "quotes" in titles' and fix.version == 1
    assert [(p.file, p.root, p.description) for p in fix.patches] == [
        ("0001-a.patch", "sglang", ""), ("0002-b.patch", "serve", "launcher")]
    assert fix.changelog[0].date == "2026-03-01" and fix.changelog[0].base_release == "0.5.21"
    assert "Replace this" in fix.rationale
    assert "# [[preconditions]]" in text  # examples stay commented out
    with_why = new_manifest_text("dsv4-fix", "t", "0.5.21", [("0001-a.patch", "sglang")],
                                 rationale="Because the pool overflowed.")
    path.write_text(with_why)
    assert load_manifest(path).rationale == "Because the pool overflowed.\n"


def test_new_manifest_text_refuses_a_bad_name() -> None:
    with pytest.raises(ManifestError, match="name 'Bad_Name'"):
        new_manifest_text("Bad_Name", "t", "0.5.21", [("0001-a.patch", "sglang")])


def test_bump_keeps_comments_and_layout(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "index-k-bytes.toml"
    shutil.copy(CATALOG / "manifests" / "index-k-bytes.toml", path)
    shutil.copytree(CATALOG / "patches" / "index-k-bytes", tmp_path / "patches" / "index-k-bytes")
    _patch(tmp_path, "index-k-bytes", "0001-rebased.patch")
    before = path.read_text()
    bump_manifest(path, version=3, base_release="0.5.22",
                  patches=[("0001-rebased.patch", "sglang", "rebased on 0.5.22")],
                  changelog_summary="Rebased on 0.5.22.", date="2026-04-01")
    after = path.read_text()
    assert after.startswith("# Sample fix: the first of a small catalog")
    # Everything before the edited keys is byte-identical, including the rationale.
    assert after.split("version = 3")[0] == before.split("version = 2")[0]
    assert '[[preconditions]]\nkind = "grep"' in after
    fix = load_manifest(path)
    assert fix.version == 3
    assert fix.upstream.base_release == "0.5.22" and fix.upstream.releases == ("0.5.22",)
    assert [p.file for p in fix.patches] == ["0001-rebased.patch"]
    assert fix.changelog[-1].version == 3 and fix.changelog[-1].summary == "Rebased on 0.5.22."
    assert fix.changelog[-1].base_release == "0.5.22" and len(fix.changelog) == 3
    assert fix.upstream.reference == "https://github.com/sgl-project/sglang/pull/1"


def test_bump_keeps_inline_comments_and_adds_first_changelog(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "x.toml"
    path.write_text(new_manifest_text("x", "t", "0.5.21", [("0001-a.patch", "sglang")],
                                      date="2026-01-01"))
    _patch(tmp_path, "x")
    bump_manifest(path, version=2, releases=["0.5.21", "0.5.22"],
                  changelog_summary="Known to apply to 0.5.22 too.", date="2026-01-05")
    text = path.read_text()
    assert "# active | dead | superseded | upstreamed" in text
    assert "# The series, applied in this order" in text
    fix = load_manifest(path)
    assert fix.upstream.releases == ("0.5.21", "0.5.22")
    assert [c.version for c in fix.changelog] == [1, 2]
    # each [[changelog]] set apart by one blank line, the appended one too, never two
    assert text.count("\n\n[[changelog]]") == 2 and "\n\n\n[[changelog]]" not in text
    bump_manifest(path, version=3, changelog_summary="Again.", date="2026-01-06")
    text = path.read_text()
    assert text.count("\n\n[[changelog]]") == 3 and "\n\n\n" not in text


def test_bump_refuses_a_version_that_does_not_go_up(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "index-k-bytes.toml"
    shutil.copy(CATALOG / "manifests" / "index-k-bytes.toml", path)
    before = path.read_bytes()
    with pytest.raises(ManifestError, match="Use version 3") as info:
        bump_manifest(path, version=2, changelog_summary="x", date="2026-04-01")
    assert info.value.details["key"] == "version"
    with pytest.raises(ManifestError, match="not YYYY-MM-DD"):
        bump_manifest(path, version=3, changelog_summary="x", date="April 1st")
    assert path.read_bytes() == before


def test_the_check_examples_in_the_docs_validate(tmp_path: Path) -> None:
    docs = (Path(__file__).parent.parent / "docs" / "manifest.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", docs, re.S)
    checks = next(b for b in blocks if "[[preconditions]]" in b)
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "documented.toml"
    path.write_text(new_manifest_text("documented", "t", "0.5.21", [("0001-a.patch", "sglang")])
                    + "\n" + checks)
    _patch(tmp_path, "documented")
    (tmp_path / "patches" / "documented" / "checks").mkdir()
    (tmp_path / "patches" / "documented" / "checks" / "bytes_per_token.py").write_text("")
    fix = load_manifest(path)
    assert {c.kind for c in fix.checks} == {"grep", "sha256", "python-syntax", "bash-syntax",
                                             "python-import", "python-script", "command"}
    config = next(b for b in blocks if "[targets.gpu1]" in b)
    (tmp_path / "patchkit.toml").write_text(config)
    assert load_config(tmp_path / "patchkit.toml").targets["gpu1"].port == 2222


_REVERT = """format = 1
name = "undo"
version = 1
title = "Undo a commit"
status = "active"
rationale = "Why."
{body}
[upstream]
base_release = "0.5.21"
"""


def _revert_manifest(tmp_path: Path, body: str) -> Path:
    (tmp_path / "manifests").mkdir(exist_ok=True)
    path = tmp_path / "manifests" / "undo.toml"
    path.write_text(_REVERT.format(body=body))
    return path


def test_a_revert_fix_needs_no_series(tmp_path: Path) -> None:
    fix = load_manifest(_revert_manifest(
        tmp_path, '[revert]\nfix = "dead"\ncommit = "0c16cace8"\npaths = ["python/x.py"]\n'))
    assert fix.patches == ()
    assert (fix.revert.fix, fix.revert.commit, fix.revert.paths, fix.revert.root) == (
        "dead", "0c16cace8", ("python/x.py",), "sglang")
    assert fix.to_json()["revert"]["fix"] == "dead"


@pytest.mark.parametrize("body, key, words", [
    ("[revert]\npaths = []\n", "revert", "names no commit"),
    ('[revert]\ncommit = "main~1"\n', "revert.commit", "is not a commit id"),
    ('[revert]\nfix = "undo"\n', "revert.fix", "is not another fix's name"),
    ('[revert]\nfix = "dead"\npath = ["x"]\n', "revert.path", "Did you mean 'paths'"),
    ('[revert]\nfix = "dead"\npaths = ["../x"]\n', "revert.paths", "must be relative"),
    ("", "patches", "the series has no patches"),
    ('[revert]\nfix = "dead"\n[[preconditions]]\nkind = "git-contains"\ncommit = "abc1"\n'
     'fix = "dead"\n', "preconditions[1].commit", "exactly one of 'commit' and 'fix'"),
    ('[revert]\nfix = "dead"\n[[preconditions]]\nkind = "git-descends-from"\n',
     "preconditions[1].tag", "exactly one of 'tag' and 'commit'"),
])
def test_bad_revert_and_git_checks_name_the_key(tmp_path: Path, body: str, key: str,
                                                words: str) -> None:
    path = _revert_manifest(tmp_path, body)
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert err.value.details["key"] == key
    assert str(path) in str(err.value) and words in str(err.value)


def test_git_checks_load_with_defaults(tmp_path: Path) -> None:
    fix = load_manifest(_revert_manifest(
        tmp_path, '[revert]\nfix = "dead"\n[[preconditions]]\nkind = "git-contains"\n'
                  'fix = "base"\n[[preconditions]]\nkind = "git-descends-from"\ntag = "v0.5.21"\n'))
    contains, descends = fix.preconditions
    assert contains.to_request() == {"kind": "git-contains", "root": "sglang", "fix": "base",
                                     "present": True, "timeout": 300.0}
    assert "HEAD contains the commit of fix base" in contains.describe()
    assert descends.to_request() == {"kind": "git-descends-from", "root": "sglang",
                                     "tag": "v0.5.21", "timeout": 300.0}


@pytest.mark.parametrize("entry, key, words", [
    ('file = "0003-c.patch"\nfiel = "x"\n', "patches[3].fiel", "Did you mean 'file'"),
    ('root = "sglang"\n', "patches[3].file", "missing required key 'file'"),
    ('file = 3\n', "patches[3].file", "must be a string"),
    ('file = "  "\n', "patches[3].file", "is empty"),
    ('file = "0001-a.patch"\n', "patches[3].file", "listed twice"),
    ('file = "/abs.patch"\n', "patches[3].file", "must be relative"),
    ('file = "sub/../../x.patch"\n', "patches[3].file", "must be relative"),
    ('file = "sub\\\\x.patch"\n', "patches[3].file", "must be relative"),
    ('file = "0003-c.patch"\nroot = "bad root"\n', "patches[3].root", "not a root name"),
    ('file = "0003-c.patch"\nroot = true\n', "patches[3].root", "must be a string"),
    ('file = "0003-c.patch"\ndescription = 1\n', "patches[3].description", "must be a string"),
    ('file = "0009-absent.patch"\n', "patches[3].file", "does not exist"),
])
def test_a_bad_entry_among_many_patches_is_refused_naming_it(tmp_path: Path, entry: str,
                                                             key: str, words: str) -> None:
    """Plain [[patches]] entries are checked in one pass; anything else takes the long way,
    which names the entry and key."""
    (tmp_path / "manifests").mkdir()
    for file in ("0001-a.patch", "0002-b.patch", "0003-c.patch"):
        _patch(tmp_path, "many", file)
    good = new_manifest_text("many", "t", "0.5.21", [("0001-a.patch", "sglang"),
                                                     ("0002-b.patch", "serve")])
    path = tmp_path / "manifests" / "many.toml"
    path.write_text(good + "\n[[patches]]\n" + entry)
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert err.value.details["key"] == key
    assert str(path) in str(err.value) and words in str(err.value)
    path.write_text(good + '\n[[patches]]\nfile = "./0003-c.patch"\nroot = "serve"\n')
    fix = load_manifest(path)
    assert [(p.file, p.root, p.path) for p in fix.patches] == [
        ("0001-a.patch", "sglang", fix.patch_dir / "0001-a.patch"),
        ("0002-b.patch", "serve", fix.patch_dir / "0002-b.patch"),
        ("./0003-c.patch", "serve", fix.patch_dir / "0003-c.patch")]


def test_allow_special_modes_is_off_unless_set(tmp_path: Path) -> None:
    """``allow_special_modes`` (docs/manifest.md): false by default, a boolean when set."""
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "suid.toml"
    text = new_manifest_text("suid", "t", "0.5.21", [("0001-a.patch", "sglang")])
    _patch(tmp_path, "suid")
    path.write_text(text)
    fix = load_manifest(path)
    assert fix.allow_special_modes is False
    assert fix.to_json()["allow_special_modes"] is False
    path.write_text("allow_special_modes = true\n" + text)
    fix = load_manifest(path)
    assert fix.allow_special_modes is True


# A TOML value or key nested thousands deep: Python's tomllib recurses once per level and
# raised RecursionError (exit 70, "internal error") instead of naming the file.
DEEP = {
    "array": "x = " + "[" * 5000 + "]" * 5000 + "\n",
    "inline-table": "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n",
    # parses (dotted keys are not recursive) into a table 10,000 deep
    "dotted-key": "[" + ".".join(["a"] * 10_000) + "]\n",
}


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
def test_deeply_nested_toml_is_a_manifest_error_naming_the_file(tmp_path: Path, text: str) -> None:
    manifest = tmp_path / "manifests" / "deep.toml"
    manifest.parent.mkdir()
    manifest.write_text('format = 1\nname = "deep"\n' + text)
    config = tmp_path / "patchkit.toml"
    config.write_text(text)
    for load, path in ((load_manifest, manifest), (load_config, config)):
        with pytest.raises(ManifestError) as info:
            load(path)
        assert str(path) in info.value.message and info.value.details["file"] == str(path)


@pytest.mark.parametrize("text", [DEEP["array"], DEEP["inline-table"]], ids=["array", "inline-table"])
def test_deeply_nested_toml_is_refused_by_the_editing_parser_too(tmp_path: Path, text: str) -> None:
    manifest = tmp_path / "manifests" / "deep.toml"
    manifest.parent.mkdir()
    manifest.write_text('format = 1\nname = "deep"\n' + text)
    before = manifest.read_bytes()
    with pytest.raises(ManifestError) as info:
        bump_manifest(manifest, version=2, changelog_summary="x", date="2026-01-01")
    assert str(manifest) in info.value.message
    assert manifest.read_bytes() == before


def test_too_deep_for_the_editing_parser_names_the_file(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever tomlkit version: a RecursionError of its parser is a ManifestError too."""
    import tomlkit

    def recurse(text: str) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(tomlkit, "parse", recurse)
    manifest = tmp_path / "manifests" / "deep.toml"
    manifest.parent.mkdir()
    manifest.write_text('format = 1\nname = "deep"\n')
    with pytest.raises(ManifestError) as info:
        bump_manifest(manifest, version=2, changelog_summary="x", date="2026-01-01")
    assert str(manifest) in info.value.message and "nested" in info.value.message


EVERY_KIND = """
[[preconditions]]
kind = "grep"
path = "a.py"
pattern = "x"
present = true
timeout = 5
[[preconditions]]
kind = "sha256"
path = "a.py"
sha256 = "%s"
timeout = 0.5
[[verification]]
kind = "python-syntax"
path = "a.py"
timeout = 7
[[verification]]
kind = "bash-syntax"
path = "a.sh"
timeout = 8
[[verification]]
kind = "python-import"
module = "sglang"
timeout = 900
[[verification]]
kind = "python-script"
script = "checks/c.py"
timeout = 1200
[[verification]]
kind = "command"
argv = ["true"]
timeout = 3600
[[preconditions]]
kind = "git-contains"
commit = "abc1"
timeout = 10
[[preconditions]]
kind = "git-descends-from"
tag = "v0.5.21"
timeout = 11
""" % ("0" * 64)


def test_timeout_is_valid_on_every_kind_and_reaches_the_request(tmp_path: Path) -> None:
    path = _revert_manifest(tmp_path, '[revert]\nfix = "dead"\n' + EVERY_KIND)
    (tmp_path / "patches" / "undo" / "checks").mkdir(parents=True)
    (tmp_path / "patches" / "undo" / "checks" / "c.py").write_text("")
    fix = load_manifest(path)
    got = {c.kind: c.to_request()["timeout"] for c in fix.checks}
    assert got == {"grep": 5, "sha256": 0.5, "python-syntax": 7, "bash-syntax": 8,
                   "python-import": 900, "python-script": 1200, "command": 3600,
                   "git-contains": 10, "git-descends-from": 11}


@pytest.mark.parametrize("value, words", [
    ("0", "not above 0"), ("-5", "not above 0"), ("inf", "not above 0"), ("nan", "not above 0"),
    ('"60"', "must be a number of seconds, not a string"),
    ("true", "must be a number of seconds, not a boolean"),
])
def test_a_bad_timeout_is_refused_naming_the_key(tmp_path: Path, value: str, words: str) -> None:
    body = ('[revert]\nfix = "dead"\n[[verification]]\nkind = "command"\nargv = ["true"]\n'
            f"timeout = {value}\n")
    path = _revert_manifest(tmp_path, body)
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert err.value.details["key"] == "verification[1].timeout"
    assert str(path) in str(err.value) and words in str(err.value)


def test_without_tomllib_tomlkit_reads_the_same_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 has no tomllib: every read goes through tomlkit, with the same result."""
    from patchkit.catalog import reader

    path = CATALOG / "manifests" / "pool-guard.toml"
    with_tomllib = load_manifest(path)
    monkeypatch.setattr(reader, "tomllib", None)
    assert load_manifest(path) == with_tomllib


def test_author_upstream_references_and_kept_headers_load(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(CATALOG, catalog)
    path = catalog / "manifests" / "pool-guard.toml"
    text = path.read_text().replace("[upstream]\n", '[upstream]\nbug = "https://bugs.example/1"\n'
                                    'origin = "vendor"\napplied = "0.5.24"\n', 1)
    path.write_text('author = "Ada Lovelace <ada@example.org>"\n' + text.replace(
        "format = 1\n", "format = 1\n", 1) + '\n[headers]\nBug-Debian = "https://bugs.debian.org/1"\n'
        'Reviewed-by = ["A <a@example.org>", "B <b@example.org>"]\n')
    fix = load_manifest(path)
    assert fix.author == "Ada Lovelace <ada@example.org>"
    assert (fix.upstream.bug, fix.upstream.origin, fix.upstream.applied) == (
        "https://bugs.example/1", "vendor", "0.5.24")
    assert fix.headers == (("Bug-Debian", "https://bugs.debian.org/1"),
                           ("Reviewed-by", "A <a@example.org>"), ("Reviewed-by", "B <b@example.org>"))
    assert fix.to_json()["headers"][1] == ["Reviewed-by", "A <a@example.org>"]


@pytest.mark.parametrize("line, key", [('author = "nobody"', "author"),
                                       ('headers = {"Bad Header" = "x"}', "headers.Bad Header"),
                                       ('headers = {Reviewed-by = 3}', "headers.Reviewed-by")])
def test_a_bad_author_or_header_is_named(tmp_path: Path, line: str, key: str) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(CATALOG, catalog)
    path = catalog / "manifests" / "pool-guard.toml"
    path.write_text(line + "\n" + path.read_text())
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert str(path) in str(err.value) and key in str(err.value)


@pytest.mark.parametrize("rationale", ["plain words", 'base_release = "0.5.21"\n\n# the series, oldest first\n'])
def test_set_upstream_writes_applied_after_the_tables_last_key(tmp_path: Path, rationale: str) -> None:
    """``applied`` goes under [upstream]'s last key, before the blank line and the comment that
    introduce the next table, with tomlkit's public API only (a release of tomlkit dropped the
    private insert this relied on); the rest of the file is kept byte for byte. A rationale
    repeating the table's text leaves no doubt about where the table is."""
    from patchkit.catalog.edit import set_upstream

    catalog = tmp_path / "catalog"
    shutil.copytree(CATALOG, catalog)
    path = catalog / "manifests" / "pool-guard.toml"
    text = path.read_text()
    text = re.sub(r'rationale = (""".*?"""|"[^"\n]*")', lambda _m: f"rationale = '''{rationale}'''",
                  text, count=1, flags=re.S)
    text = text.replace('[upstream]\nbase_release = "0.5.21"\n\n[[patches]]',
                        '[upstream]  # where it came from\nbase_release = "0.5.21"\n\n'
                        '# the series, oldest first\n[[patches]]', 1)
    assert "# the series, oldest first\n[[patches]]" in text
    path.write_text(text)
    assert set_upstream(path, "0.5.24")
    assert path.read_text() == text.replace('status = "active"', 'status = "upstreamed"', 1).replace(
        '[upstream]  # where it came from\nbase_release = "0.5.21"\n',
        '[upstream]  # where it came from\nbase_release = "0.5.21"\napplied = "0.5.24"\n', 1)
    fix = load_manifest(path)
    assert (fix.status, fix.upstream.applied) == ("upstreamed", "0.5.24")
    assert not set_upstream(path, "0.5.24")  # marked already: nothing written


def test_a_key_given_twice_is_named_in_one_sentence(tmp_path: Path) -> None:
    """tomlkit's message ends in a period of its own: it read 'already exists.. Fix'."""
    path = tmp_path / "f.toml"
    path.write_text('format = 1\nname = "f"\nname = "g"\n')
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    assert "already exists" in exc.value.message and ".." not in exc.value.message, exc.value.message


_HEAD = 'format = 1\nname = "f"\nversion = 1\n'  # lines 1-3 of each manifest below


@pytest.mark.parametrize("text, line", [
    (_HEAD + 'version = 2\ntitle = "t"\n', 4),  # a key given twice
    (_HEAD + 'title = "t"\nversion = 2', 5),  # ... on the last line, no newline after it
    (_HEAD + 'version = 2  # again\n# a comment\nstatus = "active"\n', 4),
    (_HEAD + 'title = "t"\nversion = 2\n\n\n\nstatus = "active"\n', 5),  # blank lines after it
    (_HEAD.replace("\n", "\r\n") + 'title = "t"\r\nversion = 2\r\nstatus = "x"\r\n', 5),  # CRLF
    (_HEAD + 'rationale = "r"\nrationale = """one\ntwo\n"""\ntitle = "t"\n', 5),  # multi-line
    (_HEAD + '[upstream]\nbase_release = "0.5.21"\nroot = "sglang"\nroot = "serve"\n\n'
     '[[patches]]\nfile = "0001-x.patch"\n', 7),  # in a table, another table after it
    (_HEAD + '[upstream]\nbase_release = "0.5.21"\n\n[upstream]\nroot = "sglang"\n\n'
     '[[patches]]\nfile = "0001-x.patch"\n', 7),  # a [table] given twice: its second header
    (_HEAD + '[[patches]]\nfile = "a.patch"\n\n[[patches]]\nfile = "b.patch"\nroot = "s"\n'
     'file = "c.patch"\n', 10),  # in the second [[patches]]
    (_HEAD + 'upstream.root = "a"\ntitle = "t"\nupstream.root = "b"\n', 6),  # dotted
    (_HEAD + 'upstream.root = "a"\n[upstream]\nbase_release = "0.5.21"\n\n[[patches]]\n'
     'file = "0001-x.patch"\n', 4),  # a dotted key made the table a [table] header redefines
    (_HEAD + 'upstream.root = "a"\ntitle = "t"\n\n\n[upstream]\nbase_release = "0.5.21"\n', 4),
    (_HEAD + 'title = "t"\nupstream = {root = "a"}\n[upstream]\nbase_release = "0.5.21"\n',
     6),  # an inline table, then its header: "given a second time here", at the header
    (_HEAD + 'headers = {A = "x", A = "y"}\ntitle = "t"\n', 4),  # inline table
    (_HEAD + 'title = "never closed\nstatus = "active"\n', 4),  # unterminated string
    (_HEAD + 'title = "t"\nrationale = """never\nclosed\n\nstatus = "active"\n', 5),  # ... of lines
    (_HEAD + 'headers = {A = "x",\ntitle = "t"\n', 4),  # an inline table not closed
    (_HEAD + 'title = nope\nstatus = "active"\n', 4),  # a bad value
    (_HEAD + 'title = "t"\nstatus = "active" "x"\nrationale = "r"\n', 5),  # junk after a value
])
def test_a_toml_error_names_the_line_it_is_on(tmp_path: Path, text: str, line: int) -> None:
    """FILE:LINE of a TOML syntax error is the offending line: tomlkit's position of a key
    given twice is past the item (the next line, or the end of a whole [table])."""
    path = tmp_path / "f.toml"
    path.write_bytes(text.encode())
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    assert exc.value.details["line"] == line, exc.value.message
    assert exc.value.message.startswith(f"{path}:{line}:"), exc.value.message


@pytest.mark.parametrize("text, second, first", [
    (_HEAD + 'version = 2\ntitle = "t"\n', 4, 3),
    (_HEAD + '[upstream]\nbase_release = "0.5.21"\nroot = "sglang"\nroot = "serve"\n', 7, 6),
    (_HEAD + '[upstream]\nbase_release = "0.5.21"\n\n[upstream]\nroot = "sglang"\n', 7, 4),
    (_HEAD + '[[patches]]\nfile = "a.patch"\n\n[[patches]]\nfile = "b.patch"\nroot = "s"\n'
     'file = "c.patch"\n', 10, 8),  # the second entry's own first, not the first entry's
    (_HEAD + 'title = "t"\nupstream = {root = "a"}\n[upstream]\nbase_release = "0.5.21"\n', 6, 5),
    (_HEAD + 'headers = {A = "x", A = "y"}\ntitle = "t"\n', 4, None),  # both on one line
])
def test_a_key_given_twice_names_where_it_was_given_first(tmp_path: Path, text: str,
                                                          second: int, first: int | None) -> None:
    """The second place alone left the user looking for the first in a long manifest."""
    path = tmp_path / "f.toml"
    path.write_bytes(text.encode())
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    assert exc.value.details["line"] == second, exc.value.message
    assert exc.value.details["first_line"] == first, exc.value.message
    assert (f"(first at line {first})" in exc.value.message) == (first is not None)


def test_a_multi_line_string_never_closed_is_named_where_it_begins(tmp_path: Path) -> None:
    """A rationale whose closing quotes were deleted swallowed the lines below it up to the
    next string's quotes, and the error named a line far below ("Invalid key")."""
    text = (_HEAD + 'title = "t"\nrationale = """one\ntwo\n\nstatus = "active"\n[upstream]\n'
            'base_release = "0.5.21"\n\n[[changelog]]\nversion = 1\ndate = "2026-01-01"\n'
            'notes = """first\nsecond\n"""\n')
    path = tmp_path / "f.toml"
    path.write_bytes(text.encode())
    with pytest.raises(ManifestError) as exc:
        load_manifest(path)
    assert exc.value.details["line"] == 5, exc.value.message
    assert exc.value.message.startswith(f"{path}:5: not valid TOML: the multi-line string begun "
                                        "here is not closed"), exc.value.message
    # closed, the same file reads (so the quotes of the notes were not the culprit)
    fixed = text.replace('two\n\nstatus', 'two\n"""\nstatus')
    assert "not valid TOML" not in _toml_error_or_none(tmp_path / "g.toml", fixed)


def _toml_error_or_none(path: Path, text: str) -> str:
    path.write_bytes(text.encode())
    try:
        load_manifest(path)
    except ManifestError as exc:
        return exc.message
    return ""


def test_a_missing_table_is_named_once_with_its_file(tmp_path: Path) -> None:
    """``missing required key 'upstream' in the top level (key 'upstream')`` named the key
    twice (a new-user trial)."""
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "x.toml"
    path.write_text('format = 1\nname = "x"\nversion = 1\ntitle = "x"\nstatus = "active"\n'
                    'rationale = "x"\n\n[[patches]]\nfile = "0001-x.patch"\n')
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    said = str(err.value)
    assert said.startswith(f"{path}: missing required key 'upstream' in the top level of the file. ")
    assert said.count("upstream") == 1 and err.value.details["key"] == "upstream"


@pytest.mark.parametrize("argv, bad", [
    ('["{pyth0n}", "-c", "pass"]', "{pyth0n}"), ('["{Python}", "-V"]', "{Python}"),
    ('["ls", "{root}"]', "{root}"), ('["ls", "{roots:sglang}"]', "{roots:sglang}"),
    ('["jq", "-e", "{a}", "{root:sglang}/x.json"]', None),
    ('["{python}", "-c", "print({1: 2})", "{root:sglang}"]', None)])
def test_a_misspelt_placeholder_in_a_command_is_refused_naming_it(
        tmp_path: Path, argv: str, bad: str | None) -> None:
    """``{pyth0n}`` reached the command as written (a left-undone note): a whole argument that
    is a misspelt ``{python}`` or ``{root:NAME}`` is the manifest's error, naming the key;
    other words in braces (a jq program) are the command's own."""
    path = _revert_manifest(tmp_path, '[revert]\nfix = "dead"\n[[verification]]\nkind = "command"\n'
                                      f'argv = {argv}\n')
    if bad is None:
        assert load_manifest(path).verification[0].to_request()["argv"]
        return
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert err.value.details["key"] == "verification[1].argv", err.value.details
    assert f"{bad} is not a placeholder patchkit knows" in str(err.value)


def test_a_bumped_manifest_keeps_its_comments_in_line_and_its_tables_apart(tmp_path: Path) -> None:
    """A rebase or refresh rewrites `releases` and adds a changelog entry: the comment after a
    longer `releases` stays in its column, and a table after the changelog stays a blank line
    away (they were pushed out of line, and the new entry ran into [[verification]]: a
    new-user trial)."""
    from patchkit.catalog import edit

    (tmp_path / "patches" / "f").mkdir(parents=True)
    (tmp_path / "patches" / "f" / "0001-x.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "f.toml"
    path.write_text(edit.new_manifest_text("f", "t", "0.5.22", [("0001-x.patch", "sglang")], "why",
                                           date="2026-11-01")
                    + '\n[[verification]]\nkind = "python-syntax"\npath = "x.py"\n')
    def columns() -> dict[str, int]:
        return {ln.split(" ", 1)[0]: ln.index("#") for ln in path.read_text().splitlines()
                if ln.startswith(("version", "releases")) and "#" in ln}

    before = columns()
    edit.bump_manifest(path, version=12, changelog_summary="Onto 0.5.3.", date="2026-11-02",
                       base_release="0.5.3", releases=["0.5.3"])
    text = path.read_text()
    assert columns() == before, text
    assert 'summary = "Onto 0.5.3."\n\n[[verification]]' in text, text
    assert load_manifest(path).version == 12
    # a value too long for the column pushes its comment one space past it, no further
    edit.bump_manifest(path, version=13, changelog_summary="More.", date="2026-11-03",
                       releases=["0.5.3", "0.5.22", "0.5.23"])
    assert 'releases = ["0.5.3", "0.5.22", "0.5.23"] # releases' in path.read_text()


def _unspaced_headers(text: str) -> list[str]:
    """The table headers of ``text`` not set apart as a hand-written manifest sets them: one
    blank line above (comments introducing the table may sit between), never two."""
    lines = text.split("\n")
    bad = []
    for n, line in enumerate(lines):
        if not line.startswith("[") or n == 0:
            continue
        above = n - 1
        while above > 0 and lines[above].startswith("#"):
            above -= 1
        if lines[above] != "" or (above > 0 and lines[above - 1] == ""):
            bad.append(f"{n + 1}: {line}")
    return bad + (["end: not one newline"] if not text.endswith("\n") or text.endswith("\n\n") else [])


def test_tables_an_edit_writes_are_set_apart_by_one_blank_line(tmp_path: Path) -> None:
    """A backport's new [[variants]] after a variant ending in [[variants.verification]] ran
    into it, a refresh's new [[patches]] ran into the [[preconditions]] after them, and a
    first variant or kept old version came two blank lines under the changelog (a new-user
    trial): every table header an edit writes has one blank line above it, like the rest."""
    from patchkit.catalog import edit

    repo = Path(__file__).resolve().parent.parent
    name, patch = "dsv4-bf16-sizing", "0001-count-bf16-index-k-bytes.patch"

    def fresh() -> Path:
        shutil.rmtree(tmp_path / "cat", ignore_errors=True)
        for part in ("manifests", "patches"):
            shutil.copytree(repo / part, tmp_path / "cat" / part)
        return tmp_path / "cat" / "manifests" / f"{name}.toml"

    def folder(path: Path, dir: str) -> None:
        (path.parent.parent / "patches" / name / dir).mkdir()
        shutil.copy(path.parent.parent / "patches" / name / patch,
                    path.parent.parent / "patches" / name / dir)

    path = fresh()
    assert _unspaced_headers(path.read_text()) == []
    folder(path, "0.5.21")
    edit.add_variant(path, version=5, base_release="0.5.21", variant_dir="0.5.21",
                     patches=[(patch, "sglang")], changelog_summary="Backport.",
                     date="2026-12-02", checks_from="0.5.22")
    assert _unspaced_headers(path.read_text()) == [], path.read_text()
    edit.add_variant_release(path, "0.5.22", "0.5.20")
    folder(path, "v3")
    edit.bump_variant(path, "0.5.22", version=6, changelog_summary="Split.", date="2026-12-03",
                      split=("0.5.20", "v3"))
    assert _unspaced_headers(path.read_text()) == [], path.read_text()
    edit.bump_manifest(path, version=7, changelog_summary="Refresh.", date="2026-12-04",
                       patches=[(patch, "sglang", "d")])
    assert _unspaced_headers(path.read_text()) == [], path.read_text()
    assert load_manifest(path).version == 7

    path = fresh()
    (path.parent.parent / "patches" / name / "0.5.22").rename(path.parent.parent / "patches" / name / "old")
    path.write_text(path.read_text().split("\n[[variants]]")[0] + "\n")  # no variant yet
    edit.bump_manifest(path, version=5, changelog_summary="Onto 0.5.24.", date="2026-12-02",
                       base_release="0.5.24", keep_as="old")
    assert _unspaced_headers(path.read_text()) == [], path.read_text()
    folder(path, "0.5.21")
    path.write_text(path.read_text().split("\n[[variants]]")[0] + "\n")
    edit.add_variant(path, version=6, base_release="0.5.21", variant_dir="0.5.21",
                     patches=[(patch, "sglang")], changelog_summary="Backport.", date="2026-12-03")
    assert _unspaced_headers(path.read_text()) == [], path.read_text()

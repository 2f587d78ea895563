"""`patchkit new` and `patchkit refresh` through the command line, on real checkouts.

The shipped fixes are authored again from scratch: each series is applied to a clean 0.5.23
checkout with ``git apply`` (as an author's edit would leave it), captured with ``new``, and
the captured series must produce byte-identical files on a clean tree. Commands run through
``patchkit.cli.main.main``, the console script's own error boundary, so exit codes are real.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.cli.main import main
from patchkit.errors import EXIT_USAGE
from patchkit.catalog.series import parse_patch
from patchkit.targets import LocalTarget

REPO = Path(__file__).resolve().parent.parent
SHIPPED = Catalog(REPO)
SERVE_SCRIPT = REPO / "docs" / "examples" / "serve_dsv4_prefill.sh"
CONFIGURATOR = "python/sglang/srt/model_executor/pool_configurator.py"
LINEAGE = ["dsv4-bf16-index-k", "hicache-index-k-sync", "revert-hicache-index-k-sync",
           "dsv4-bf16-sizing"]


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def _console_script(argv: tuple[str, ...]) -> None:
    """``patchkit ARGV`` as the installed command runs it (``main`` exits with the code)."""
    main(list(argv))


def patchkit(catalog: Path, *args: str) -> Result:
    # Wide enough that rich never folds a long temporary path in the middle.
    return CliRunner().invoke(_console_script, ["--catalog", str(catalog), *args],
                              env={"COLUMNS": "400"})


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True,
                          check=True).stdout


def reset(tree: Path) -> None:
    git(tree, "checkout", "-q", "--", ".")
    git(tree, "clean", "-qfd")


def apply_series(tree: Path, patches: list[Path]) -> None:
    for patch in patches:
        git(tree, "apply", "--whitespace=nowarn", str(patch))


def touched(tree: Path) -> dict[str, bytes]:
    """The bytes of every file that differs from HEAD (git's view, untracked included)."""
    out = {}
    for line in git(tree, "status", "--porcelain", "--untracked-files=all").splitlines():
        path = line[3:]
        full = tree / path
        out[path] = full.read_bytes() if full.exists() else b"<deleted>"
    return out


def catalog_state(catalog: Path) -> dict[str, tuple[str, int]]:
    """Every entry under the catalog with its content hash and mtime: proves "nothing written"."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(catalog):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), catalog) + "/"] = ("dir", 0)
        for name in filenames:
            path = Path(dirpath, name)
            out[str(path.relative_to(catalog))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


@pytest.fixture
def new_catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    (root / "manifests").mkdir(parents=True)
    return root


@pytest.fixture
def serve_repo(tmp_path: Path) -> Path:
    """The deployment's serve scripts as a git repository (root ``serve``)."""
    serve = tmp_path / "serve"
    serve.mkdir()
    shutil.copy2(SERVE_SCRIPT, serve / SERVE_SCRIPT.name)
    git(serve, "init", "-q")
    git(serve, "add", ".")
    git(serve, "commit", "-q", "-m", "prefill serve script")
    return serve


# -- new: every shipped fix authored again -----------------------------------------------------


@pytest.mark.network
def test_new_recaptures_every_shipped_fix_byte_for_byte(catalog_tree: Path, serve_repo: Path,
                                                        new_catalog: Path) -> None:
    for name in LINEAGE:
        shipped = SHIPPED.get(name)
        if name == "revert-hicache-index-k-sync":
            # Its series is written against a tree where the dead fix is: commit that first.
            apply_series(catalog_tree, [p.path for p in SHIPPED.get(shipped.reverts).patches])
            git(catalog_tree, "commit", "-q", "-am", "the dead fix, committed in a fork")
        apply_series(catalog_tree, [p.path for p in shipped.patches])
        expected = touched(catalog_tree)
        assert expected, name

        result = patchkit(new_catalog, "new", name, "--from", str(catalog_tree),
                          "--title", shipped.title)
        assert result.exit_code == 0, result.output
        assert f"created {name} v1 (base 0.5.23)" in flat(result.output)
        fix = Catalog(new_catalog).get(name)
        assert (fix.version, fix.status, fix.upstream.base_release) == (1, "active", "0.5.23")
        assert fix.upstream.releases == ("0.5.23",)
        assert [(p.root, p.path.is_file()) for p in fix.patches] == [("sglang", True)]
        assert {rec["path"] for ref in fix.patches for rec in parse_patch(ref.path, ref.root)} \
            == set(expected)

        reset(catalog_tree)  # the tree HEAD names: the release, or the fork's commit
        apply_series(catalog_tree, [p.path for p in fix.patches])
        assert touched(catalog_tree) == expected, f"{name}: git apply of the new series"
        reset(catalog_tree)
        # patchkit's own engine places the captured hunks the same way (zero fuzz).
        target = LocalTarget(roots={"sglang": str(catalog_tree)})
        applied = api.apply(Catalog(new_catalog), target, [name])
        assert applied.fixes[0].outcome == "applied"
        assert touched(catalog_tree) == expected, f"{name}: patchkit apply of the new series"
        api.rollback(Catalog(new_catalog), target, [name])
        assert touched(catalog_tree) == {}

    # The serve-script fix: a root that is no SGLang tree names its release explicitly.
    shipped = SHIPPED.get("prefill-hicache-off")
    apply_series(serve_repo, [p.path for p in shipped.patches])
    expected = touched(serve_repo)
    result = patchkit(new_catalog, "new", shipped.name, "--from", str(serve_repo),
                      "--root", "serve", "--base-release", "0.5.21", "--title", shipped.title)
    assert result.exit_code == 0, result.output
    fix = Catalog(new_catalog).get(shipped.name)
    assert [p.root for p in fix.patches] == ["serve"]
    reset(serve_repo)
    apply_series(serve_repo, [p.path for p in fix.patches])
    assert touched(serve_repo) == expected
    assert sorted(Catalog(new_catalog).names()) == sorted(SHIPPED.names())


# -- refresh -----------------------------------------------------------------------------------


@pytest.mark.network
def test_refresh_records_a_new_version_and_keeps_the_manifest_comments(
        catalog_tree: Path, new_catalog: Path) -> None:
    shipped = SHIPPED.get("dsv4-bf16-sizing")
    apply_series(catalog_tree, [p.path for p in shipped.patches])
    assert patchkit(new_catalog, "new", shipped.name, "--from", str(catalog_tree),
                    "--title", shipped.title).exit_code == 0
    manifest = new_catalog / "manifests" / f"{shipped.name}.toml"
    note = "# Reviewed with the inference team; see the incident notes."
    manifest.write_text(manifest.read_text().replace("[upstream]\n", f"{note}\n[upstream]\n"))
    assert Catalog(new_catalog).get(shipped.name).version == 1

    conf = catalog_tree / CONFIGURATOR
    old = "\n            return get_dsv4_bf16_index_k_bytes_per_token(self.indexer_head_dim)\n"
    comment = "            # the pool's own helper: what it allocates is what we price\n"
    assert conf.read_text().count(old) == 1
    conf.write_text(conf.read_text().replace(old, "\n" + comment + old[1:]))
    edited = touched(catalog_tree)

    result = patchkit(new_catalog, "refresh", shipped.name, "--from", str(catalog_tree),
                      "--summary", "Explain the bf16 pricing in the code.")
    assert result.exit_code == 0, result.output
    assert f"refreshed {shipped.name} v2 (base 0.5.23)" in flat(result.output)
    fix = Catalog(new_catalog).get(shipped.name)
    assert fix.version == 2
    assert [(c.version, c.summary) for c in fix.changelog] == [
        (1, "First version."), (2, "Explain the bf16 pricing in the code.")]
    text = manifest.read_text()
    assert note in text
    assert "# bump on every change of the series" in text  # the skeleton's own comments too
    series = fix.patches[0].path.read_text()
    assert "\n+" + comment in series

    before = catalog_state(new_catalog)
    again = patchkit(new_catalog, "refresh", shipped.name, "--from", str(catalog_tree))
    assert again.exit_code == 0, again.output
    assert "unchanged" in flat(again.output)
    assert catalog_state(new_catalog) == before
    assert Catalog(new_catalog).get(shipped.name).version == 2

    reset(catalog_tree)
    apply_series(catalog_tree, [p.path for p in fix.patches])
    assert touched(catalog_tree) == edited


# -- errors leave the catalog as it was -------------------------------------------------------


def test_new_refuses_bad_sources_and_existing_names_without_writing(
        tmp_path: Path, new_catalog: Path, serve_repo: Path) -> None:
    def refused(*args: str) -> str:
        before = catalog_state(new_catalog)
        result = patchkit(new_catalog, "new", *args)
        assert result.exit_code == EXIT_USAGE, result.output
        assert catalog_state(new_catalog) == before
        return flat(result.output)

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "serve_dsv4_prefill.sh").write_text("echo hi\n")
    message = refused("from-plain", "--from", str(plain), "--base-release", "0.5.21")
    assert "not the top of a git checkout" in message and str(plain) in message

    message = refused("nothing", "--from", str(serve_repo), "--base-release", "0.5.21")
    assert "nothing to capture" in message and "no changes against HEAD" in message
    (serve_repo / "new_helper.sh").write_text("echo new\n")  # untracked: named, not taken
    message = refused("nothing", "--from", str(serve_repo), "--base-release", "0.5.21")
    assert "other than untracked files, taken only when named: new_helper.sh" in message, message
    (serve_repo / "new_helper.sh").unlink()

    script = serve_repo / SERVE_SCRIPT.name
    script.write_text(script.read_text().replace("--hicache-ratio 2", "--hicache-ratio 4"))
    # another root than sglang needs no release: its series checks none (releases = [])
    dry = patchkit(new_catalog, "new", "no-release", "--from", str(serve_repo), "--root", "serve",
                   "--dry-run")
    assert dry.exit_code == 0 and "(base any)" in dry.output, dry.output

    made = patchkit(new_catalog, "new", "serve-tuning", "--from", str(serve_repo),
                    "--root", "serve", "--base-release", "0.5.21")
    assert made.exit_code == 0, made.output
    message = refused("serve-tuning", "--from", str(serve_repo), "--root", "serve",
                      "--base-release", "0.5.21")
    assert "already exists" in message and "patchkit refresh serve-tuning" in message
    assert Catalog(new_catalog).names() == ["serve-tuning"]


def test_refresh_drops_a_patch_whose_files_no_longer_change(tmp_path: Path,
                                                            new_catalog: Path) -> None:
    """A two-patch series whose second file was reverted in the checkout: refresh rewrites
    the series as the first patch alone, all of it or nothing (no stray staging files)."""
    src = tmp_path / "src"
    (src / "python" / "sglang").mkdir(parents=True)
    (src / "python" / "sglang" / "_version.py").write_text('__version__ = "0.5.21"\n')
    for name in ("a.py", "b.py"):
        (src / "python" / "sglang" / name).write_text("one = 1\ntwo = 2\nthree = 3\n")
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "a release")
    for name in ("a.py", "b.py"):
        path = src / "python" / "sglang" / name
        path.write_text(path.read_text().replace("two = 2", "two = 22"))
    made = patchkit(new_catalog, "new", "two", "python/sglang/a.py", "--from", str(src),
                    "--title", "two files")
    assert made.exit_code == 0, made.output
    patch_dir = new_catalog / "patches" / "two"
    (patch_dir / "0002-b.patch").write_text(
        "From: patchkit <fixes@patchkit.invalid>\nSubject: [PATCH] b\n\n---\n"
        + git(src, "diff", "--", "python/sglang/b.py"))
    manifest = new_catalog / "manifests" / "two.toml"
    manifest.write_text(manifest.read_text().replace(
        '[[patches]]\nfile = "0001-two-files.patch"\nroot = "sglang"\n',
        '[[patches]]\nfile = "0001-two-files.patch"\nroot = "sglang"\n\n'
        '[[patches]]\nfile = "0002-b.patch"\nroot = "sglang"\n'))
    assert [p.file for p in Catalog(new_catalog).get("two").patches] == [
        "0001-two-files.patch", "0002-b.patch"]

    git(src, "checkout", "-q", "--", "python/sglang/b.py")
    result = patchkit(new_catalog, "refresh", "two", "--from", str(src))
    assert result.exit_code == 0, result.output
    fix = Catalog(new_catalog).get("two")
    assert fix.version == 2 and [p.file for p in fix.patches] == ["0001-two-files.patch"]
    assert sorted(p.name for p in patch_dir.iterdir()) == ["0001-two-files.patch"]
    again = patchkit(new_catalog, "refresh", "two", "--from", str(src))
    assert again.exit_code == 0 and "unchanged" in flat(again.output)


# -- modes, the base release, permissions (issue 12, item 13) ----------------------------------


def small_checkout(tmp_path: Path, release: str = "0.5.21") -> Path:
    """A committed checkout-layout tree: a version file and two small modules, all 0644."""
    src = tmp_path / "src"
    pkg = src / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "_version.py").write_text(f'__version__ = "{release}"\n')
    for name in ("a.py", "b.py"):
        (pkg / name).write_text("one = 1\ntwo = 2\nthree = 3\n")
        os.chmod(pkg / name, 0o644)
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "a release")
    return src


def perms(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_new_captures_a_mode_change_with_an_edit_and_apply_sets_it(
        tmp_path: Path, new_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    script = src / "python" / "sglang" / "a.py"
    script.write_text(script.read_text().replace("two = 2", "two = 22"))
    os.chmod(script, 0o755)
    made = patchkit(new_catalog, "new", "exec-a", "--from", str(src), "--title", "run a")
    assert made.exit_code == 0, made.output
    fix = Catalog(new_catalog).get("exec-a")
    text = fix.patches[0].path.read_text()
    assert "old mode 100644\nnew mode 100755\n" in text
    assert [(r["path"], r["op"], r["mode"]) for r in parse_patch(fix.patches[0].path, "sglang")] \
        == [("python/sglang/a.py", "modify", "100755")]

    reset(src)
    os.chmod(script, 0o644)
    assert git(src, "status", "--porcelain") == ""
    apply_series(src, [fix.patches[0].path])  # git reads the mode lines the same way
    assert perms(script) == 0o755 and "two = 22" in script.read_text()
    reset(src)
    os.chmod(script, 0o644)

    target = LocalTarget(roots={"sglang": str(src)})
    assert api.apply(Catalog(new_catalog), target, ["exec-a"]).fixes[0].outcome == "applied"
    assert perms(script) == 0o755 and "two = 22" in script.read_text()
    api.rollback(Catalog(new_catalog), target, ["exec-a"])
    assert perms(script) == 0o644 and touched(src) == {}


def test_new_captures_a_mode_only_change(tmp_path: Path, new_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    script = src / "python" / "sglang" / "b.py"
    os.chmod(script, 0o755)
    made = patchkit(new_catalog, "new", "exec-b", "--from", str(src), "--title", "run b")
    assert made.exit_code == 0, made.output
    assert "python/sglang/b.py" in made.output
    fix = Catalog(new_catalog).get("exec-b")
    text = fix.patches[0].path.read_text()
    assert text.endswith("diff --git a/python/sglang/b.py b/python/sglang/b.py\n"
                         "old mode 100644\nnew mode 100755\n")
    assert [(r["op"], r["mode"], r["hunks"]) for r in parse_patch(fix.patches[0].path, "sglang")] \
        == [("modify", "100755", [])]

    os.chmod(script, 0o644)
    assert git(src, "status", "--porcelain") == ""
    apply_series(src, [fix.patches[0].path])
    assert perms(script) == 0o755
    os.chmod(script, 0o644)

    before = script.read_bytes()
    target = LocalTarget(roots={"sglang": str(src)})
    assert api.apply(Catalog(new_catalog), target, ["exec-b"]).fixes[0].outcome == "applied"
    assert perms(script) == 0o755 and script.read_bytes() == before
    assert [(s.name, s.state) for s in api.status(Catalog(new_catalog), target).status] == [
        ("exec-b", "applied")]
    api.rollback(Catalog(new_catalog), target, ["exec-b"])
    assert perms(script) == 0o644 and script.read_bytes() == before

    # refresh keeps it: the series read back from the checkout is the same mode-only patch
    os.chmod(script, 0o755)
    again = patchkit(new_catalog, "refresh", "exec-b", "--from", str(src))
    assert again.exit_code == 0 and "unchanged" in flat(again.output), again.output


def test_new_reads_the_base_release_from_head_not_the_edited_tree(
        tmp_path: Path, new_catalog: Path) -> None:
    src = small_checkout(tmp_path, release="0.5.21")
    version = src / "python" / "sglang" / "_version.py"
    version.write_text('__version__ = "0.5.99.dev0"\n')
    module = src / "python" / "sglang" / "a.py"
    module.write_text(module.read_text().replace("two = 2", "two = 22"))
    made = patchkit(new_catalog, "new", "from-head", "--from", str(src), "--title", "t")
    assert made.exit_code == 0, made.output
    assert "created from-head v1 (base 0.5.21)" in flat(made.output)
    assert Catalog(new_catalog).get("from-head").upstream.base_release == "0.5.21"

    module.write_text(module.read_text().replace("one = 1", "one = 11"))
    refreshed = patchkit(new_catalog, "refresh", "from-head", "--from", str(src))
    assert refreshed.exit_code == 0, refreshed.output
    assert "refreshed from-head v2 (base 0.5.21)" in flat(refreshed.output)


def test_new_writes_the_series_directory_with_normal_permissions(
        tmp_path: Path, new_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    module = src / "python" / "sglang" / "a.py"
    module.write_text(module.read_text().replace("two = 2", "two = 22"))
    old = os.umask(0o022)
    try:
        made = patchkit(new_catalog, "new", "perms", "--from", str(src), "--title", "t")
    finally:
        os.umask(old)
    assert made.exit_code == 0, made.output
    patch_dir = new_catalog / "patches" / "perms"
    assert perms(new_catalog / "patches") == 0o755
    assert perms(patch_dir) == 0o755
    assert [perms(p) for p in patch_dir.iterdir()] == [0o644]
    assert perms(new_catalog / "manifests" / "perms.toml") == 0o644
    assert [p.name for p in (new_catalog / "patches").iterdir()] == ["perms"]  # no staging left


def test_new_of_a_file_git_lists_but_that_equals_head_says_nothing_to_capture(
        tmp_path: Path, new_catalog: Path) -> None:
    """A staged edit undone in the work tree: git status lists the file, its bytes and mode
    are HEAD's. Nothing to capture, said of the checkout, never of a staging file."""
    src = small_checkout(tmp_path)
    module = src / "python" / "sglang" / "a.py"
    text = module.read_text()
    module.write_text(text.replace("two = 2", "two = 22"))
    git(src, "add", "python/sglang/a.py")
    module.write_text(text)
    assert git(src, "status", "--porcelain") == "MM python/sglang/a.py\n"
    before = catalog_state(new_catalog)
    result = patchkit(new_catalog, "new", "staged", "--from", str(src), "--title", "t")
    assert result.exit_code == EXIT_USAGE, result.output
    message = flat(result.output)
    assert "nothing to capture" in message and str(src) in message
    assert ".staged." not in message and "patches" not in message
    assert catalog_state(new_catalog) == before


def test_refresh_keeps_the_mbox_from_line_and_the_hunk_function_labels(
        tmp_path: Path, new_catalog: Path) -> None:
    """A series written by git format-patch starts with the mbox ``From <sha> <date>`` line and
    names the function of each hunk after its second ``@@``: refresh wrote the patch again
    without either (a new-user trial). It keeps the From line, and labels each hunk as git
    diff does, where the patch had labels."""
    src = small_checkout(tmp_path)
    module = src / "python" / "sglang" / "a.py"
    body = "".join(f"    v{n} = {n}\n" for n in range(8))
    module.write_text("".join(f"def f{n}():\n{body}    return 0\n\n\n" for n in range(3)))
    git(src, "commit", "-qam", "functions")
    module.write_text(module.read_text().replace("def f1():\n" + body,
                                                 "def f1():\n" + body.replace("v6 = 6", "v6 = 66")))
    made = patchkit(new_catalog, "new", "fn", "python/sglang/a.py", "--from", str(src),
                    "--title", "three")
    assert made.exit_code == 0, made.output
    git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "three")
    mail = git(src, "format-patch", "-1", "--stdout")
    git(src, "reset", "-q", "--soft", "HEAD~1")
    patch = next((new_catalog / "patches" / "fn").glob("*.patch"))
    patch.write_text(mail)
    assert mail.startswith("From ") and "@@ def f1():" in mail
    module.write_text(module.read_text().replace("    v5 = 5\n", "    v5 = 55\n"))

    result = patchkit(new_catalog, "refresh", "fn", "--from", str(src))
    assert result.exit_code == 0, result.output
    text = patch.read_text()
    assert text.splitlines()[0] == mail.splitlines()[0], text
    hunks = [line for line in text.splitlines() if line.startswith("@@")]
    assert hunks == [line for line in git(src, "diff", "HEAD").splitlines() if line.startswith("@@")], text
    assert text.endswith(" return 0\n-- \n" + mail.rsplit("\n-- \n", 1)[1]), text
    assert len(hunks) == 3 and all(h.endswith("():") for h in hunks), hunks


def test_new_and_import_commits_label_hunks_as_git_diff_does(
        tmp_path: Path, new_catalog: Path) -> None:
    """`new` and `import --commits` wrote hunk headers with nothing after the second ``@@``,
    while refresh labels them as git diff does (a new-user trial): a fix's first version reads
    like git's diff of the same change, each hunk naming its function."""
    src = small_checkout(tmp_path)
    module = src / "python" / "sglang" / "a.py"
    body = "".join(f"    v{n} = {n}\n" for n in range(8))
    module.write_text("".join(f"def f{n}():\n{body}    return 0\n\n\n" for n in range(3)))
    git(src, "commit", "-qam", "functions")
    module.write_text(module.read_text().replace("    v6 = 6\n", "    v6 = 66\n", 2))
    expected = [line for line in git(src, "diff", "HEAD").splitlines() if line.startswith("@@")]
    assert len(expected) == 2 and all(h.endswith("():") for h in expected), expected

    def hunks(name: str) -> list[str]:
        patch = next((new_catalog / "patches" / name).glob("*.patch"))
        return [line for line in patch.read_text().splitlines() if line.startswith("@@")]

    made = patchkit(new_catalog, "new", "fn", "--from", str(src), "--title", "edit")
    assert made.exit_code == 0, made.output
    assert hunks("fn") == expected
    git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "edit")
    made = patchkit(new_catalog, "new", "fc", "--from", str(src), "--commits", "HEAD~1..HEAD")
    assert made.exit_code == 0, made.output
    assert hunks("fc") == expected
    made = patchkit(new_catalog, "import", "--from", str(src), "--commits", "HEAD~1..HEAD",
                    "--name", "ic")
    assert made.exit_code == 0, made.output
    assert hunks("ic") == expected

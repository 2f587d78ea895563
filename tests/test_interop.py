"""Patches in other tools' formats (issue 16, items 1 to 3): export and import through the
real tools, `git am`, `git format-patch`, `quilt push -a` and `quilt pop -a`.

Round trips are exact: import(export(fix)) gives the same series (the diff bytes of every
patch) and the same manifest fields, for every shipped fix on the real 0.5.23 release tree,
in both mbox and quilt formats. Commands run through the console script's error boundary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.catalog.model import Fix
from patchkit.interop import split_diff
from patchkit.targets import LocalTarget
from tests.test_authoring import (REPO, SHIPPED, apply_series, flat, git, patchkit, reset,
                                  serve_repo, small_checkout, touched)

__all__ = ["serve_repo"]  # a fixture, used by name

X = "python/sglang/a.py"
REVERT = "revert-hicache-index-k-sync"


def ok(catalog: Path, *args: str) -> str:
    result = patchkit(catalog, *map(str, args))
    assert result.exit_code == 0, result.output
    return flat(result.output)


def new_catalog(path: Path) -> Path:
    ok(path, "init", str(path))  # --catalog is not read by init
    return path


def fields(fix: Fix) -> tuple:
    up = fix.upstream
    return (fix.title, fix.rationale, fix.author, up.forwarding, up.reference, up.bug,
            up.origin, up.applied, fix.headers)


def series(fix: Fix) -> list[tuple[str, str]]:
    """(root, diff) of each patch: the bytes of its hunks, its mail header aside."""
    return [(p.root, split_diff(p.path.read_bytes().decode("utf-8", "surrogateescape"),
                                p.path)[1]) for p in fix.patches]


def no_author_env() -> dict[str, str]:
    """The environment without GIT_AUTHOR_*: a commit's author can only come from the mail."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_AUTHOR_")}


def git_am(tree: Path, *mboxes: Path) -> None:
    subprocess.run(["git", "am", "-q", *map(str, mboxes)], cwd=tree, env=no_author_env(),
                   check=True, capture_output=True)


def quilt(tree: Path, patches: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["quilt", "--quiltrc", "/dev/null", *args], cwd=tree,
                          env=dict(os.environ, QUILT_PATCHES=str(patches)),
                          capture_output=True, text=True)


def worktree_files(tree: Path) -> dict[str, bytes]:
    """touched() without quilt's own .pc/ bookkeeping."""
    return {k: v for k, v in touched(tree).items() if not k.startswith(".pc/")}


def start(tree: Path, name: str) -> str:
    """The tree at its release, and for the revert fix with the dead fix committed on top (a
    fork that committed it): the base the fix's series is written against."""
    git(tree, "reset", "-q", "--hard", "HEAD" if tree.name == "serve" else "v0.5.23")
    git(tree, "clean", "-qfdx")
    if name == REVERT:
        apply_series(tree, [p.path for p in SHIPPED.get("hicache-index-k-sync").patches])
        git(tree, "commit", "-q", "-am", "the dead fix, committed in a fork")
    return git(tree, "rev-parse", "HEAD").strip()


def expected_files(tree: Path, fix: Fix) -> dict[str, bytes]:
    apply_series(tree, [p.path for p in fix.patches])
    found = touched(tree)
    reset(tree)
    assert found, fix.name
    return found


@pytest.mark.network
def test_every_shipped_fix_round_trips_through_mbox_git_am_and_format_patch(
        catalog_tree: Path, serve_repo: Path, tmp_path: Path) -> None:
    names = SHIPPED.names()
    assert REVERT in names and len(names) == 5
    out = tmp_path / "mbox"
    said = ok(REPO, "export", *names, "--format", "mbox", "-o", out)
    identity = "Test Author <author@example.com>"  # the catalog repository's git user
    assert f"From {identity} (the catalog repository's git user)" in said
    direct, via_git = new_catalog(tmp_path / "direct"), new_catalog(tmp_path / "via-git")
    for name in names:
        shipped = SHIPPED.get(name)
        tree = serve_repo if shipped.patches[0].root == "serve" else catalog_tree
        base = start(tree, name)
        expected = expected_files(tree, shipped)

        git_am(tree, out / f"{name}.mbox")
        assert git(tree, "rev-list", "--count", f"{base}..HEAD").strip() == "1"
        assert touched(tree) == {}
        assert {rel: (tree / rel).read_bytes() for rel in expected} == expected, name
        author, date, subject, body = git(tree, "log", "-1", "--format=%an <%ae>%n%aI%n%s%n%b"
                                          ).split("\n", 3)
        assert author == (shipped.author or identity)
        assert date == f"{shipped.changelog[-1].date}T00:00:00+00:00"
        assert subject == shipped.title
        assert body.startswith(shipped.rationale.strip()[:200])
        assert f"Patchkit-Fix: {name} v{shipped.version}\n" in body

        made = tmp_path / "format-patch" / name
        git(tree, "format-patch", "-q", "-o", str(made), f"{base}..HEAD")
        # The shipped name is replaced only when asked; the export carries its base release.
        assert patchkit(direct, "import", "--mbox", str(out / f"{name}.mbox")).exit_code == 2
        ok(direct, "import", "--mbox", out / f"{name}.mbox", "--replace")
        ok(via_git, "import", "--mbox", made, "--replace")
        again = Catalog(direct).get(name)
        # it replaces the shipped fix: the next version of it, so a host running the shipped
        # one is told of an upgrade (as v1 it said "vN applied, v1 in the catalog")
        assert again.version == shipped.version + 1, name
        assert again.version == shipped.next_version, name  # above its variants' versions too
        summary = again.changelog[-1].summary
        assert f"replacing v{shipped.version} (the shipped fix of that name)" in summary, name
        assert ("and its variants" in summary) == bool(shipped.variants), summary
        assert again.upstream.base_release == shipped.upstream.base_release, name
        assert Catalog(via_git).get(name).upstream.base_release == shipped.upstream.base_release
        assert fields(again) == fields(shipped), name
        assert series(again) == series(shipped), name
        through_git = Catalog(via_git).get(name)
        assert fields(through_git) == fields(shipped), name
        git(tree, "reset", "-q", "--hard", base)
        apply_series(tree, [p.path for p in through_git.patches])
        assert touched(tree) == expected, f"{name}: the series git format-patch wrote"


@pytest.mark.network
def test_every_shipped_fix_round_trips_through_quilt_push_and_pop(
        catalog_tree: Path, serve_repo: Path, tmp_path: Path) -> None:
    imported = new_catalog(tmp_path / "imported")
    for name in SHIPPED.names():
        shipped = SHIPPED.get(name)
        tree = serve_repo if shipped.patches[0].root == "serve" else catalog_tree
        start(tree, name)
        expected = expected_files(tree, shipped)
        out = tmp_path / "quilt" / name
        ok(REPO, "export", name, "--format", "quilt", "-o", out)
        assert (out / "series").read_text() == "".join(
            f"{name}/{p.file}\n" for p in shipped.patches)
        head = (out / name / shipped.patches[0].file).read_text()
        assert head.startswith(f"Description: {shipped.title}\n")
        assert f"\nLast-Update: {shipped.changelog[-1].date}\n" in head

        pushed = quilt(tree, out, "push", "-a")
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        assert worktree_files(tree) == expected, name
        popped = quilt(tree, out, "pop", "-a")
        assert popped.returncode == 0, popped.stdout + popped.stderr
        assert worktree_files(tree) == {}, name

        ok(imported, "import", "--quilt", out, "--replace")
        again = Catalog(imported).get(name)
        assert again.upstream.base_release == shipped.upstream.base_release, name
        assert fields(again) == fields(shipped), name
        assert series(again) == series(shipped), name
        assert again.changelog[0].date == shipped.changelog[-1].date  # Last-Update


def test_a_fix_without_a_series_of_its_own_is_refused_with_what_to_do(tmp_path: Path) -> None:
    catalog = new_catalog(tmp_path / "fixes")
    manifest = (REPO / "manifests" / f"{REVERT}.toml").read_text()
    manifest = manifest.split("\n[[variants]]", 1)[0] + "\n"  # its 0.5.22 variant has a series
    start, end = manifest.index("[[patches]]"), manifest.index("[[preconditions]]")
    (catalog / "manifests" / "git-only-revert.toml").write_text(
        manifest[:start].replace(f'name = "{REVERT}"', 'name = "git-only-revert"') + manifest[end:])
    for fmt in ("mbox", "quilt", "dep3"):
        result = patchkit(catalog, "export", "git-only-revert", "--format", fmt, "-o",
                          str(tmp_path / fmt))
        assert result.exit_code == 2, result.output
        message = flat(result.output)
        assert "git-only-revert has no series of its own" in message
        assert "Export the fix it reverts (hicache-index-k-sync)" in message
        assert not (tmp_path / fmt).exists()


def full_fix(tmp_path: Path) -> tuple[Path, Path, str]:
    """A user's catalog with a two-patch fix made by `new --commits` (its author the first
    commit's), every DEP-3 field set in its manifest; the checkout and the base commit."""
    catalog = new_catalog(tmp_path / "fixes")
    src = small_checkout(tmp_path, release="0.5.23")
    base = git(src, "rev-parse", "HEAD").strip()
    env = dict(os.environ, GIT_AUTHOR_NAME="Zoë Example", GIT_AUTHOR_EMAIL="zoe@example.org",
               GIT_AUTHOR_DATE="2026-11-10T12:00:00+01:00")
    (src / X).write_text((src / X).read_text().replace("two = 2", "two = 22"))
    subprocess.run(["git", "commit", "-qam", "a: two is twenty-two\n\nThe pool needs 22.\n\n"
                    "Reviewed-by: Ray <ray@example.org>"], cwd=src, env=env, check=True)
    (src / "python/sglang/c.py").write_text("c = 3\n")
    git(src, "add", ".")
    git(src, "commit", "-qm", "c: a new module")
    ok(catalog, "new", "pair", "--from", src, "--commits", f"{base}..HEAD")
    fix = Catalog(catalog).get("pair")
    assert fix.author == "Zoë Example <zoe@example.org>"  # new records the first commit's
    assert fix.patches[0].path.read_text().startswith("From: Zoë Example <zoe@example.org>\n")
    manifest = catalog / "manifests" / "pair.toml"
    text = manifest.read_text().replace(
        'forwarding = "not-forwarded"', 'forwarding = "merged"').replace(
        'reference = ""', 'reference = "https://github.com/sgl-project/sglang/pull/1"\n'
        'bug = "https://github.com/sgl-project/sglang/issues/2"\n'
        'origin = "upstream, https://github.com/sgl-project/sglang/commit/abc"\n'
        'applied = "0.5.24"')
    assert fix.headers == (("Reviewed-by", "Ray <ray@example.org>"),)  # its trailer
    assert fix.rationale == "The pool needs 22.\n"
    text = text.replace('Reviewed-by = "Ray <ray@example.org>"\n',
                        'Reviewed-by = ["Ray <ray@example.org>", "Sam <sam@example.org>"]\n'
                        'Bug-Debian = "https://bugs.debian.org/3"\n')
    manifest.write_text(text)
    git(catalog, "commit", "-qam", "pair: upstream fields")
    return catalog, src, base


def test_a_fix_with_every_field_round_trips_through_git_am_and_quilt(tmp_path: Path) -> None:
    catalog, src, base = full_fix(tmp_path)
    fix = Catalog(catalog).get("pair")
    assert fix.upstream.forwarding == "merged" and len(fix.headers) == 3
    shown = ok(catalog, "show", "pair")  # every field, as export writes it
    for trailer in ("Author: Zoë Example <zoe@example.org>",
                    "Origin: upstream, https://github.com/sgl-project/sglang/commit/abc",
                    "Bug: https://github.com/sgl-project/sglang/issues/2",
                    "Forwarded: https://github.com/sgl-project/sglang/pull/1",
                    "Applied-Upstream: 0.5.24", "Reviewed-by: Ray <ray@example.org>",
                    "Reviewed-by: Sam <sam@example.org>", "Bug-Debian: https://bugs.debian.org/3"):
        assert trailer in shown, shown
    git(src, "reset", "-q", "--hard", base)

    ok(catalog, "export", "pair", "--format", "mbox", "-o", tmp_path / "out")
    git_am(src, tmp_path / "out" / "pair.mbox")
    log = git(src, "log", "--reverse", "--format=%an <%ae>|%aI|%s", f"{base}..HEAD").splitlines()
    date = f"{fix.changelog[-1].date}T00:00:00+00:00"  # the latest changelog date
    assert log == [f"Zoë Example <zoe@example.org>|{date}|a: two is twenty-two",
                   f"Zoë Example <zoe@example.org>|{date}|c: a new module"]
    body = git(src, "log", "-1", "--format=%b", "HEAD~1")
    assert body.startswith(
        "The pool needs 22.\n\n"
        "Origin: upstream, https://github.com/sgl-project/sglang/commit/abc\n"
        "Bug: https://github.com/sgl-project/sglang/issues/2\n"
        "Forwarded: https://github.com/sgl-project/sglang/pull/1\nPatchkit-Forwarding: merged\n"
        "Applied-Upstream: 0.5.24\nReviewed-by: Ray <ray@example.org>\n")
    assert "Reviewed-by: Sam <sam@example.org>\nBug-Debian:" in body

    direct = new_catalog(tmp_path / "direct")  # the two mails of one mbox file: one fix
    ok(direct, "import", "--mbox", tmp_path / "out" / "pair.mbox", "--release", "0.5.23")
    again = Catalog(direct).get("pair")
    assert fields(again) == fields(fix) and series(again) == series(fix)

    # The commits git am made, imported as a git range: the trailers are read back too.
    ranged = new_catalog(tmp_path / "ranged")
    said = ok(ranged, "import", "--from", src, "--commits", f"{base}..HEAD")
    assert "imported pair v1 (base 0.5.23)" in said  # named by Patchkit-Fix, release at A
    again = Catalog(ranged).get("pair")
    assert fields(again) == fields(fix) and series(again) == series(fix)
    assert git(ranged, "log", "-1", "--format=%s") == "pair v1: a: two is twenty-two\n"

    git(src, "format-patch", "-q", "-o", str(tmp_path / "fp"), f"{base}..HEAD")
    back = new_catalog(tmp_path / "back")
    said = ok(back, "import", "--mbox", tmp_path / "fp", "--release", "0.5.23", "--json")
    assert '"name": "pair"' in said
    again = Catalog(back).get("pair")
    assert fields(again) == fields(fix)
    assert len(again.patches) == 2

    git(src, "reset", "-q", "--hard", base)
    ok(catalog, "export", "pair", "--format", "quilt", "-o", tmp_path / "quilt")
    head = (tmp_path / "quilt" / "pair" / fix.patches[0].file).read_text()
    assert head.startswith("Description: a: two is twenty-two\n The pool needs 22.\n"
                           "Author: Zoë Example <zoe@example.org>\n"
                           "Origin: upstream, https://github.com/sgl-project/sglang/commit/abc\n"
                           "Bug: https://github.com/sgl-project/sglang/issues/2\n")
    assert quilt(src, tmp_path / "quilt", "push", "-a").returncode == 0
    assert sorted(worktree_files(src)) == ["python/sglang/a.py", "python/sglang/c.py"]
    assert quilt(src, tmp_path / "quilt", "pop", "-a").returncode == 0
    assert worktree_files(src) == {}
    quilted = new_catalog(tmp_path / "quilted")
    ok(quilted, "import", "--quilt", tmp_path / "quilt", "--target", src)  # one series: one fix
    again = Catalog(quilted).get("pair")
    assert fields(again) == fields(fix) and series(again) == series(fix)
    assert again.upstream.base_release == "0.5.23"  # read from the tree

    ok(catalog, "export", "pair", "--format", "dep3", "-o", tmp_path / "dep3")
    assert not (tmp_path / "dep3" / "series").exists()
    assert (tmp_path / "dep3" / "pair" / fix.patches[1].file).read_text().startswith(
        "Description: c: a new module\nAuthor: Zoë Example <zoe@example.org>\n"
        "Patchkit-Fix: pair v1\n---\ndiff --git ")


def test_an_export_imports_back_at_its_version_and_a_replaced_fix_continues(tmp_path: Path
                                                                           ) -> None:
    """An export says its fix's version (Patchkit-Fix: NAME vN): the fix comes back at vN, the
    version hosts applied from the catalog it came from; replacing a fix at vM gives vM+1; a
    name of one's own is a new fix, v1."""
    catalog, _src, _base = full_fix(tmp_path)
    ok(catalog, "export", "pair", "--format", "mbox", "-o", tmp_path / "out")
    mail = tmp_path / "out" / "pair.mbox"
    text = mail.read_text()
    assert text.count("Patchkit-Fix: pair v1\n") == 2
    mail.write_text(text.replace("Patchkit-Fix: pair v1\n", "Patchkit-Fix: pair v3\n"))

    other = new_catalog(tmp_path / "other")
    said = ok(other, "import", "--mbox", mail, "--release", "0.5.23")
    assert "imported pair v3 (base 0.5.23)" in said, said
    fix = Catalog(other).get("pair")
    assert fix.version == 3 and [c.version for c in fix.changelog] == [3]
    assert fix.changelog[0].summary == "Imported by `patchkit import` from an export of v3."
    assert git(other, "log", "-1", "--format=%s") == "pair v3: a: two is twenty-two\n"

    said = ok(other, "import", "--mbox", mail, "--release", "0.5.23", "--replace", "--json")
    assert json.loads(said)["fixes"][0]["version"] == 4
    fix = Catalog(other).get("pair")
    assert fix.version == 4 and fix.changelog[-1].summary == (
        "Imported by `patchkit import` from an export of v3, replacing v3 (your fix of that "
        "name).")

    # a variant above the top level (a refreshed older release's series, v5): the replacing
    # import is numbered above it, not at v5 again (hosts on 0.5.22 record v5), and says that
    # the variant goes, which it did silently
    manifest = other / "manifests" / "pair.toml"
    (other / "patches" / "pair" / "0.5.22").mkdir()
    for p in fix.patches:
        shutil.copy(p.path, other / "patches" / "pair" / "0.5.22" / p.file)
    manifest.write_text(manifest.read_text() + '\n[[changelog]]\nversion = 5\ndate = "2026-11-02"\n'
                        'base_release = "0.5.22"\nsummary = "The 0.5.22 series."\n\n[[variants]]\n'
                        'version = 5\nbase_release = "0.5.22"\nreleases = ["0.5.22"]\n'
                        + "".join(f'\n[[variants.patches]]\nfile = "{p.file}"\n' for p in fix.patches))
    assert Catalog(other).get("pair").variant_for("0.5.22").version == 5
    said = ok(other, "import", "--mbox", mail, "--release", "0.5.23", "--replace")
    assert "pair v6 (base 0.5.23)" in said and "--replace drops its variants (v5 for 0.5.22)" in said, said
    assert Catalog(other).get("pair").version == 6

    said = ok(other, "import", "--mbox", mail, "--release", "0.5.23", "--name", "mine")
    assert "imported mine v1" in said and Catalog(other).get("mine").version == 1


QUILT_PATCH = """\
Description: a: two is twenty-two
 The pool needs 22.
 .
 Measured on the real pool.
Author: Quinn <quinn@example.org>
Bug-Debian: https://bugs.debian.org/1
Reviewed-by: Ray <ray@example.org>
Forwarded: not-needed
Last-Update: 2026-10-01
---
Index: src/python/sglang/a.py
===================================================================
--- src.orig/python/sglang/a.py\t2026-10-01 10:00:00.000000000 +0000
+++ src/python/sglang/a.py\t2026-10-01 10:00:01.000000000 +0000
@@ -1,3 +1,3 @@
 one = 1
-two = 2
+two = 22
 three = 3
"""

DEEP_PATCH = """\
Description: b: a new module, in a patch made two levels up
--- work/src.orig/python/sglang/d.py\t1970-01-01 00:00:00.000000000 +0000
+++ work/src/python/sglang/d.py\t2026-10-01 10:00:01.000000000 +0000
@@ -0,0 +1 @@
+d = 4
"""


MAIL_PATCH = """\
From 1234567890123456789012345678901234567890 Mon Sep 17 00:00:00 2001
From: Mo Mailer <mo@example.org>
Date: Thu, 1 Oct 2026 10:00:00 +0000
Subject: [PATCH] e: a module from a git format-patch file

---
 python/sglang/e.py | 1 +
 1 file changed, 1 insertion(+)

diff --git a/python/sglang/e.py b/python/sglang/e.py
new file mode 100644
index 0000000..1111111
--- /dev/null
+++ b/python/sglang/e.py
@@ -0,0 +1 @@
+e = 5
--\x20
2.43.0

"""


def test_a_quilt_series_with_orig_prefixes_and_strip_levels_imports_as_quilt_applies_it(
        tmp_path: Path) -> None:
    src = small_checkout(tmp_path, release="0.5.23")
    patches = tmp_path / "debian" / "patches"
    patches.mkdir(parents=True)
    (patches / "two.patch").write_text(QUILT_PATCH)
    (patches / "deep.patch").write_text(DEEP_PATCH)
    (patches / "mail.patch").write_text(MAIL_PATCH)  # its signature line is "-- "
    (patches / "series").write_text("# the fix\ntwo.patch\ndeep.patch -p2\nmail.patch\n")
    pushed = quilt(src, patches, "push", "-a")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    expected = worktree_files(src)
    assert sorted(expected) == [X, "python/sglang/d.py", "python/sglang/e.py"]
    assert quilt(src, patches, "pop", "-a").returncode == 0
    shutil.rmtree(src / ".pc")

    catalog = new_catalog(tmp_path / "fixes")
    dry = ok(catalog, "import", "--quilt", tmp_path / "debian", "--one", "--name", "two",
             "--target", src, "--dry-run")
    assert "would be imported two v1 (base 0.5.23)" in dry
    assert not (catalog / "manifests" / "two.toml").exists()
    ok(catalog, "import", "--quilt", tmp_path / "debian", "--one", "--name", "two",
       "--target", src)
    fix = Catalog(catalog).get("two")
    assert (fix.title, fix.rationale) == ("a: two is twenty-two",
                                          "The pool needs 22.\n\nMeasured on the real pool.\n")
    assert fix.author == "Quinn <quinn@example.org>"
    assert (fix.upstream.forwarding, fix.upstream.reference) == ("not-applicable", "")
    assert fix.headers == (("Bug-Debian", "https://bugs.debian.org/1"),
                           ("Reviewed-by", "Ray <ray@example.org>"))
    assert fix.changelog[0].date == "2026-10-01"
    assert [p.file for p in fix.patches] == [
        "0001-a-two-is-twenty-two.patch", "0002-b-a-new-module-in-a-patch-made-two-levels-up.patch",
        "0003-e-a-module-from-a-git-format-patch-file.patch"]
    assert fix.patches[2].path.read_text().startswith("From: Mo Mailer <mo@example.org>\n")
    applied = api.apply(Catalog(catalog), LocalTarget(roots={"sglang": str(src)}), ["two"])
    assert applied.fixes[0].outcome == "applied"
    assert worktree_files(src) == expected
    assert git(catalog, "log", "-1", "--format=%s") == "two v1: a: two is twenty-two\n"


def test_an_export_of_fixes_on_different_releases_imports_back_each_on_its_own(
        tmp_path: Path) -> None:
    """docs/interop.md: "an export imports back with no option", each fix's base release from
    its own Patchkit-Release. Fixes exported together on different releases (0.5.23's
    index-k, the serve fix written on 0.5.21) used to be refused ("cannot tell which SGLang
    release"), and --release then gave every fix that one release."""
    out = tmp_path / "quilt"
    ok(REPO, "export", "dsv4-bf16-index-k", "prefill-hicache-off", "--format", "quilt", "-o", out)
    catalog = new_catalog(tmp_path / "mine")
    ok(catalog, "import", "--quilt", out, "--replace")
    mine = Catalog(catalog)
    assert mine.get("dsv4-bf16-index-k").upstream.base_release == "0.5.23"
    assert tuple(mine.get("dsv4-bf16-index-k").upstream.releases) == ("0.5.23",)
    assert mine.get("prefill-hicache-off").upstream.base_release == "0.5.21"
    # --release still names the release of every fix, as it says
    other = new_catalog(tmp_path / "other")
    ok(other, "import", "--quilt", out, "--replace", "--release", "0.5.22")
    assert Catalog(other).get("prefill-hicache-off").upstream.base_release == "0.5.22"


def test_an_mbox_of_several_exported_fixes_comes_back_as_those_fixes(tmp_path: Path) -> None:
    """`git format-patch` of an export of two fixes, imported without --split: each mail's
    Patchkit-Fix header names its fix, so they come back as the two fixes (sizing depending
    on index-k), not silently merged under the first name; --name numbers them."""
    out = tmp_path / "mbox"
    ok(REPO, "export", "dsv4-bf16-index-k", "dsv4-bf16-sizing", "--format", "mbox", "-o", out)
    mails = sorted(out.glob("*.mbox"))
    assert len(mails) == 2
    both = tmp_path / "both.mbox"
    both.write_bytes(b"".join(m.read_bytes() for m in mails))
    catalog = new_catalog(tmp_path / "mine")
    said = ok(catalog, "import", "--mbox", both, "--replace", "--dry-run")
    assert said.count("dry run: nothing was written") == 1, said
    ok(catalog, "import", "--mbox", both, "--replace")
    mine = Catalog(catalog)
    assert {p.file for p in mine.get("dsv4-bf16-sizing").patches} and \
        tuple(mine.get("dsv4-bf16-sizing").depends_on) == ("dsv4-bf16-index-k",)
    own = {n for n in mine.names() if (catalog / "manifests" / f"{n}.toml").is_file()}
    assert own == {"dsv4-bf16-index-k", "dsv4-bf16-sizing"}
    named = new_catalog(tmp_path / "named")
    ok(named, "import", "--mbox", both, "--name", "fp")
    assert {n for n in Catalog(named).names()
            if (named / "manifests" / f"{n}.toml").is_file()} == {"fp-1", "fp-2"}
    assert tuple(Catalog(named).get("fp-2").depends_on) == ("fp-1",)


def test_a_quilt_patch_without_a_header_is_named_by_its_file_as_quilt_names_it(
        tmp_path: Path) -> None:
    """`quilt new` + `quilt refresh` writes a bare diff (no DEP-3 header): quilt knows the
    patch by its file name, and so does the import; it used to be refused, pointing at
    --name and --mbox, neither of which could take it."""
    patches = tmp_path / "q" / "patches"
    patches.mkdir(parents=True)
    (patches / "series").write_text("lower-log-level.patch\n")
    (patches / "lower-log-level.patch").write_text(
        "Index: q/python/sglang/version.py\n"
        "===================================================================\n"
        "--- q.orig/python/sglang/version.py\n+++ q/python/sglang/version.py\n"
        "@@ -1 +1 @@\n-__version__ = \"0.5.23\"\n+__version__ = \"0.5.23+local\"\n")
    catalog = new_catalog(tmp_path / "mine")
    ok(catalog, "import", "--quilt", patches.parent, "--release", "0.5.23")
    fix = Catalog(catalog).get("lower-log-level")
    assert fix.title == "lower-log-level" and fix.upstream.base_release == "0.5.23"
    assert "no header" in fix.rationale
    ok(catalog, "import", "--quilt", patches.parent, "--release", "0.5.23", "--name", "loc")
    assert Catalog(catalog).get("loc").title == "lower-log-level"


def test_mbox_takes_the_shells_list_of_mails_as_git_am_does(tmp_path: Path) -> None:
    """`patchkit import --mbox DIR/*`: the shell gives every mail; they are read in order."""
    out = tmp_path / "mbox"
    ok(REPO, "export", "dsv4-bf16-index-k", "dsv4-bf16-sizing", "--format", "mbox", "-o", out)
    mails = sorted(str(m) for m in out.glob("*.mbox"))
    catalog = new_catalog(tmp_path / "mine")
    ok(catalog, "import", "--mbox", *mails, "--replace")
    assert {n for n in Catalog(catalog).names()
            if (catalog / "manifests" / f"{n}.toml").is_file()} == {"dsv4-bf16-index-k",
                                                                     "dsv4-bf16-sizing"}
    stray = patchkit(catalog, "import", mails[0], "--release", "0.5.23")
    assert stray.exit_code == 2 and "go after --mbox" in stray.output, stray.output


def test_a_quilt_patch_made_with_diff_against_a_kept_copy_imports_as_quilt_applies_it(
        tmp_path: Path) -> None:
    """``diff -u x.py.orig x.py`` (-p0), the hand-made patch many vendor series hold, is an
    edit of x.py for quilt and GNU patch, and so for import and apply; before, both refused it
    as a rename (a new-user trial)."""
    src = small_checkout(tmp_path, release="0.5.23")
    patches = tmp_path / "q"
    patches.mkdir()
    (patches / "kept.patch").write_text(
        f"--- {X}.orig\t2026-10-01 10:00:00.000000000 +0000\n"
        f"+++ {X}\t2026-10-01 10:00:01.000000000 +0000\n"
        "@@ -1,3 +1,3 @@\n one = 1\n-two = 2\n+two = 222\n three = 3\n")
    (patches / "series").write_text("kept.patch -p0\n")
    pushed = quilt(src, patches, "push", "-a")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    expected = worktree_files(src)
    assert quilt(src, patches, "pop", "-a").returncode == 0
    shutil.rmtree(src / ".pc")

    catalog = new_catalog(tmp_path / "fixes")
    ok(catalog, "import", "--quilt", patches, "--one", "--name", "kept", "--target", src)
    applied = api.apply(Catalog(catalog), LocalTarget(roots={"sglang": str(src)}), ["kept"])
    assert applied.fixes[0].outcome == "applied"
    assert worktree_files(src) == expected and b"two = 222" in expected[X]


@pytest.mark.parametrize("fmt", ["mbox", "quilt"])
def test_hosts_running_a_fix_keep_it_through_an_export_and_import_of_its_version(
        tmp_path: Path, fmt: str) -> None:
    """A series is its change, not its patch files' bytes: a host running vN of a fix verifies,
    applies and syncs against a catalog that imported an export of vN (other mail headers,
    the same diffs); a changed diff at the same version is still refused, and a host applied
    before patch digests named the diff (its record holds whole-file digests) still verifies
    against the unchanged catalog it applied from."""
    catalog, _src, _base = full_fix(tmp_path)
    host = small_checkout(tmp_path / "host", release="0.5.23")
    old = small_checkout(tmp_path / "old", release="0.5.23")
    ok(catalog, "apply", "pair", "--target", host)
    ok(catalog, "apply", "pair", "--target", old)
    state = old / ".patchkit" / "state.json"  # the record an earlier patchkit wrote
    data = json.loads(state.read_text())
    for p in data["fixes"][0]["patches"]:
        assert set(p) > {"file", "sha256"}, p  # the record names each patch's diff too
        for key in set(p) - {"file", "sha256"}:
            del p[key]
    state.write_text(json.dumps(data))
    ok(catalog, "verify", "pair", "--target", old)
    ok(catalog, "sync", "--target", old)

    ok(catalog, "export", "pair", "--format", fmt, "-o", tmp_path / "out")
    other = new_catalog(tmp_path / "other")
    if fmt == "mbox":
        ok(other, "import", "--mbox", tmp_path / "out" / "pair.mbox")
    else:
        ok(other, "import", "--quilt", tmp_path / "out")
    fix = Catalog(other).get("pair")
    assert fix.version == 1 and series(fix) == series(Catalog(catalog).get("pair"))
    assert fix.patches[0].path.read_bytes() != Catalog(catalog).get("pair").patches[0].path.read_bytes()
    assert "verified pair v1" in ok(other, "verify", "pair", "--target", host)
    assert "already-applied" in ok(other, "apply", "pair", "--target", host)
    assert "already-applied" in ok(other, "sync", "--target", host)
    assert "applied" in ok(other, "status", "--target", host, "--exit-code")

    # the same version with another diff: still another change than the host runs
    patch = fix.patches[0].path
    patch.write_text(patch.read_text().replace("+two = 22", "+two = 23"))
    for cmd in (["verify", "pair"], ["apply", "pair"], ["sync"]):
        result = patchkit(other, *cmd, "--target", str(host))
        assert result.exit_code == 1, result.output
        assert ("applied here is not the catalog's v1: its series changed since, without a "
                f"version bump ({patch.name})") in flat(result.output)


def test_an_import_that_would_make_a_depends_on_cycle_is_refused_writing_nothing(
        tmp_path: Path) -> None:
    """Two exported fixes each depending on the other (a manifest edited by hand before the
    export): import wrote and committed them, and log, matrix, apply, sync and rebase then
    failed on the cycle in the catalog (a trial). The import is refused, naming the cycle and
    the mails, before anything is written."""
    out = tmp_path / "mbox"
    ok(REPO, "export", "dsv4-bf16-index-k", "dsv4-bf16-sizing", "--format", "mbox", "-o", out)
    index_k = out / "dsv4-bf16-index-k.mbox"
    index_k.write_text(index_k.read_text().replace(
        "Patchkit-Release: 0.5.23\n", "Patchkit-Release: 0.5.23\nPatchkit-Depends-On: dsv4-bf16-sizing\n"))
    catalog = new_catalog(tmp_path / "mine")
    head = git(catalog, "rev-parse", "HEAD")
    before = {p: p.read_bytes() for p in sorted(catalog.rglob("*")) if p.is_file() and ".git" not in p.parts}
    for extra in (["--dry-run"], []):
        result = patchkit(catalog, "import", "--mbox", str(index_k), str(out / "dsv4-bf16-sizing.mbox"),
                          "--replace", *extra)
        assert result.exit_code == 2, result.output
        said = flat(result.output)
        assert "depends_on forms a cycle" in said, said
        assert "dsv4-bf16-index-k -> dsv4-bf16-sizing -> dsv4-bf16-index-k" in said, said
        assert str(index_k) in said, said
    assert git(catalog, "rev-parse", "HEAD") == head
    assert {p: p.read_bytes() for p in sorted(catalog.rglob("*"))
            if p.is_file() and ".git" not in p.parts} == before


def test_a_fix_marked_upstream_comes_back_marked_from_an_export(tmp_path: Path) -> None:
    """`upstream check --mark` makes a fix `upstreamed` with `[upstream] applied = R`; its
    export carried `applied`, and the import wrote the fix back `active` (listed again, and
    offered to be marked again: a trial). It comes back `upstreamed`, as marked."""
    source = new_catalog(tmp_path / "source")
    ok(source, "import", "--mbox", *sorted(_exported(tmp_path / "one", "dsv4-bf16-index-k")),
       "--replace")
    manifest = source / "manifests" / "dsv4-bf16-index-k.toml"
    manifest.write_text(manifest.read_text().replace('status = "active"', 'status = "upstreamed"')
                        .replace("[upstream]\n", '[upstream]\napplied = "0.5.23"\n', 1))
    assert Catalog(source).get("dsv4-bf16-index-k").status == "upstreamed"
    out = tmp_path / "again"
    ok(source, "export", "dsv4-bf16-index-k", "--format", "mbox", "-o", out)
    mine = new_catalog(tmp_path / "mine")
    ok(mine, "import", "--mbox", *sorted(out.glob("*.mbox")), "--replace")
    back = Catalog(mine).get("dsv4-bf16-index-k")
    assert (back.status, back.upstream.applied) == ("upstreamed", "0.5.23")


def _exported(out: Path, *names: str) -> list[Path]:
    ok(REPO, "export", *names, "--format", "mbox", "-o", out)
    return list(out.glob("*.mbox"))


def test_a_replacing_import_says_which_checks_of_the_fix_it_drops(tmp_path: Path) -> None:
    """An export carries no checks: an import replacing a fix (a round trip, --replace) wrote
    its next version without the preconditions and verification the replaced one had, and no
    warning said so (a trial; docs/interop.md says an export holds none). It says what goes."""
    catalog, _src, _base = full_fix(tmp_path)
    ok(catalog, "export", "pair", "--format", "mbox", "-o", tmp_path / "out")
    manifest = catalog / "manifests" / "pair.toml"
    manifest.write_text(manifest.read_text() + '\n[[verification]]\nkind = "python-syntax"\n'
                        'root = "sglang"\npath = "python/sglang/a.py"\n')
    git(catalog, "commit", "-qam", "pair: a verification")
    old = Catalog(catalog).get("pair")
    said = ok(catalog, "import", "--mbox", tmp_path / "out" / "pair.mbox", "--release", "0.5.23",
              "--replace")
    flat = " ".join(said.split())
    assert (f"pair: --replace drops its {len(old.preconditions)} precondition(s) and "
            f"{len(old.verification)} verification check(s) from its manifest") in flat, flat
    assert Catalog(catalog).get("pair").verification == ()


def test_export_orders_fixes_after_their_dependencies_and_refuses_a_cycle(tmp_path: Path) -> None:
    """`export beta alpha --format quilt` listed beta first though it depends on alpha, so
    `quilt push -a` failed; with a depends_on cycle made by hand, export wrote the series and
    an mbox whose Patchkit-Depends-On made the cycle again on import, where list, show and
    apply refuse it (a trial)."""
    catalog = tmp_path / "cat"
    for part in ("manifests", "patches"):
        shutil.copytree(REPO / part, catalog / part)
    out = tmp_path / "q"
    ok(catalog, "export", "dsv4-bf16-sizing", "dsv4-bf16-index-k", "--format", "quilt", "-o", out)
    series = [line.split("/")[0] for line in (out / "series").read_text().splitlines() if line]
    assert series.index("dsv4-bf16-index-k") < series.index("dsv4-bf16-sizing"), series
    manifest = catalog / "manifests" / "dsv4-bf16-index-k.toml"
    manifest.write_text(manifest.read_text().replace(
        "depends_on = []", 'depends_on = ["dsv4-bf16-sizing"]', 1))
    refused = patchkit(catalog, "export", "dsv4-bf16-sizing", "--format", "mbox", "-o",
                       str(tmp_path / "m"))
    assert refused.exit_code == 2, refused.output
    assert "depends_on forms a cycle" in refused.output
    assert not (tmp_path / "m").exists() or list((tmp_path / "m").iterdir()) == []

"""The client-side git layer (patchkit.gitrepo) on real repositories and real git."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import gitrepo


def _git(cwd: Path, *args: str, data: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=data, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def two_commits(tmp_path: Path) -> Path:
    """A repository: a base commit (tag ``base``), then two commits each changing one file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    body = "".join(f"line {i}\n" for i in range(1, 30))
    for name in ("a.py", "b.py"):
        (repo / name).write_text(body)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "tag", "base")
    (repo / "a.py").write_text(body.replace("line 5\n", "line 5 fixed\n"))
    _git(repo, "commit", "-q", "-am", "fix a\n\nWhy a.")
    (repo / "b.py").write_text(body.replace("line 20\n", "line 20 fixed\x0c here\n").replace(
        "line 29\n", "- line 29\n-- \n"))  # a hunk whose lines look like a mail signature,
    # and a form feed: a line break for str.splitlines, not for git
    _git(repo, "commit", "-q", "-am", "fix b")
    return repo


def _series(repo: Path, form: str) -> list[str]:
    """The two commits as a series: git format-patch's files (mbox line, diffstat, signature),
    or patchkit's own (From:/Subject: header, as `patchkit new` writes)."""
    if form == "format-patch":
        out = repo.parent / "mails"
        _git(repo, "format-patch", "-q", "-o", str(out), "base..HEAD")
        return [p.read_text() for p in sorted(out.iterdir())]
    texts = []
    for rev, subject in (("HEAD~1", "fix a"), ("HEAD", "fix b")):
        texts.append(f"From: t <t@example.com>\nSubject: [PATCH] {subject}\n\nWhy.\n---\n"
                     + _git(repo, "diff", f"{rev}~1", rev))
    return texts


@pytest.mark.parametrize("form", ["format-patch", "patchkit"])
def test_patch_id_of_a_series_is_git_patch_id_of_the_commit_holding_it(two_commits: Path,
                                                                       form: str) -> None:
    """The id a git-contains precondition and a rebase look for: a fork that committed the
    whole series in one commit has this id, whatever the series files' mail headers."""
    squashed = _git(two_commits, "diff", "base", "HEAD")
    expected = _git(two_commits, "patch-id", "--stable", data=squashed).split()[0]
    texts = _series(two_commits, form)
    assert len(texts) == 2 and all("diff --git " in t for t in texts)
    assert gitrepo.patch_id("".join(texts)) == expected
    # one patch alone is the id of its own commit, header or not
    for rev, text in zip(("HEAD~1", "HEAD"), texts):
        alone = _git(two_commits, "show", "--format=", rev)
        assert gitrepo.patch_ids([text]) == [
            _git(two_commits, "patch-id", "--stable", data=alone).split()[0]]


@pytest.mark.parametrize("form", ["format-patch", "patchkit"])
def test_the_engine_hashes_a_series_as_the_client_does(two_commits: Path, form: str) -> None:
    """Hosts have no GitPython: the engine gets the series and hashes it with the same rule,
    in the git patch-id that hashes the commits; it finds the commit holding it alone."""
    from patchkit.engine import gitops

    co = gitops.checkout_of(str(two_commits))
    assert co is not None
    texts = _series(two_commits, form)
    pid, found = co.find_by_patch_id("".join(texts), ["a.py", "b.py"])
    assert pid == gitrepo.patch_id("".join(texts)) and found == []  # no one commit holds both
    for rev, text, path in zip(("HEAD~1", "HEAD"), texts, ("a.py", "b.py")):
        pid, found = co.find_by_patch_id(text, [path])
        assert pid == gitrepo.patch_id(text)
        assert [c.sha for c in found] == [_git(two_commits, "rev-parse", rev).strip()]
        assert found[0].files == (("M", path),) and found[0].title.endswith(" fix " + path[0])
    assert co.find_by_patch_id("".join(texts), []) == (gitrepo.patch_id("".join(texts)), [])


def test_patch_id_of_no_diff_is_none() -> None:
    assert gitrepo.patch_ids(["From: t\nSubject: nothing\n\n", ""]) == [None, None]


def test_gitpython_is_loaded_when_git_is_first_asked_and_answers_as_git_does(
        two_commits: Path) -> None:
    """Importing the git layer (and what imports it) loads no GitPython: a local apply or
    status never pays for it. Its answers on objects and refs are git's own."""
    code = ("import sys\nfrom patchkit import gitrepo, upstream, authoring\n"
            "before = 'git' in sys.modules\n"
            "sha = gitrepo.rev_parse(sys.argv[1], 'HEAD')\n"
            "print(before, 'git' in sys.modules, sha)")
    out = subprocess.run([sys.executable, "-c", code, str(two_commits)], capture_output=True,
                         text=True, check=True, timeout=60).stdout.split()
    assert out == ["False", "True", _git(two_commits, "rev-parse", "HEAD").strip()]
    info = gitrepo.commit_info(two_commits, "base")
    fmt = "%H%n%T%n%P%n%an%n%ae%n%aI%n%cI"
    assert [info.sha, info.tree, " ".join(info.parents), info.author.name, info.author.email,
            info.authored_date, info.committed_date] == \
        _git(two_commits, "show", "-s", f"--format={fmt}", "base").split("\n")[:7]
    assert gitrepo.list_tags(two_commits) == {"base": info.sha}
    assert gitrepo.rev_parse(two_commits, "no-such-ref") is gitrepo.rev_parse(two_commits, "0" * 40) is None
    assert gitrepo.rev_parse(two_commits, "base~0") == info.sha
    gitrepo.set_config(two_commits, "core.fileMode", "false")
    assert gitrepo.tracks_modes(two_commits) is False

"""`patchkit upstream list/checkout` through the CLI, on the session's real 0.5.21 history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from patchkit.errors import EXIT_USAGE
from patchkit.upstream import UpstreamRepo

pytestmark = pytest.mark.network


def run(args: list[str], monkeypatch: pytest.MonkeyPatch, upstream: UpstreamRepo) -> tuple[int, str, str]:
    """Run the real entry point, so exit codes come from the error boundary."""
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(upstream.path))
    proc = subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_list_shows_the_fetched_release(upstream_repo: UpstreamRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(["upstream", "list", "--json"], monkeypatch, upstream_repo)
    assert code == 0, err
    assert "0.5.21" in json.loads(out)


def test_checkout_makes_a_clean_tree_of_the_release(
    upstream_repo: UpstreamRepo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dest = tmp_path / "sglang"
    (tmp_path / "my-fixes").mkdir()  # given as my-fixes/../sglang: said as the path it is
    code, out, err = run(["upstream", "checkout", "0.5.21", str(tmp_path / "my-fixes" / ".." / "sglang")],
                         monkeypatch, upstream_repo)
    assert code == 0, err
    assert out == f"SGLang 0.5.21 checked out at {dest.resolve()}\n"
    assert "'0.5.21'" in (dest / "python" / "sglang" / "_version.py").read_text()
    status = subprocess.run(["git", "-C", str(dest), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""
    tag = subprocess.run(["git", "-C", str(dest), "describe", "--tags", "--exact-match"],
                         capture_output=True, text=True)
    assert tag.stdout.strip() == "v0.5.21"


def test_checkout_into_a_non_empty_directory_is_refused(
    upstream_repo: UpstreamRepo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine\n")
    code, _out, err = run(["upstream", "checkout", "0.5.21", str(dest)], monkeypatch, upstream_repo)
    assert code == EXIT_USAGE
    assert str(dest) in err and "not empty" in err
    assert sorted(p.name for p in dest.iterdir()) == ["keep.txt"]


def test_checkout_json_names_the_release_and_the_tree(
    upstream_repo: UpstreamRepo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dest = tmp_path / "sglang"
    code, out, err = run(["upstream", "checkout", "0.5.21", str(dest), "--json"], monkeypatch,
                         upstream_repo)
    assert code == 0, err
    data = json.loads(out)
    head = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert data == {"ok": True, "op": "upstream checkout", "version": "0.5.21", "tag": "v0.5.21",
                    "commit": head, "date": data["date"], "path": str(dest.resolve())}
    assert data["date"].startswith("20")

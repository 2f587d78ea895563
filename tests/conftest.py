"""Shared test fixtures: a hermetic environment for every test.

Fixture families live in their own modules under tests/fixtures/ and are registered here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins: list[str] = ["tests.fixtures.sshd", "tests.fixtures.sglang"]

_REAL_HOME = os.environ.get("HOME", "")


@pytest.fixture(autouse=True)
def hermetic_seal(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, fixed identities and dates, no editor, a private HOME."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.com")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("EDITOR", "false")
    monkeypatch.setenv("GIT_EDITOR", "false")
    monkeypatch.delenv("PATCHKIT_FAULT", raising=False)
    monkeypatch.delenv("PATCHKIT_DEBUG", raising=False)
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")


@pytest.fixture(scope="session")
def persistent_cache() -> Path:
    """A cache that outlives the test session (downloaded SGLang wheels), like a user's."""
    base = os.environ.get("PATCHKIT_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(_REAL_HOME or "/tmp", ".cache"),
        "patchkit-tests",
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path

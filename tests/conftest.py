"""Shared test fixtures: a hermetic environment for every test.

Fixture families live in their own modules under tests/fixtures/ and are registered here.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from patchkit.cache import cache_dir
from tests.fixtures.fleet_hosts import ansible_env


# A signal ignored when patchkit starts stays ignored (nohup's convention, patchkit.errors): the
# tests that interrupt a run need the defaults a terminal gives, whatever the runner ignores.
for _name in ("SIGHUP", "SIGTERM", "SIGQUIT"):
    if signal.getsignal(getattr(signal, _name)) is signal.SIG_IGN:
        signal.signal(getattr(signal, _name), signal.SIG_DFL)

pytest_plugins: list[str] = ["tests.fixtures.sshd", "tests.fixtures.sglang", "tests.fixtures.fleet",
                             "tests.fixtures.upstream_corpus", "tests.fixtures.progress"]

REAL_HOME = os.environ.get("HOME", "")
#: Where downloaded SGLang releases outlive a test session, as a user's do:
#: $PATCHKIT_TEST_CACHE, else the release store of patchkit's own cache directory.
RELEASE_STORE = Path(os.environ.get("PATCHKIT_TEST_CACHE") or cache_dir() / "upstream")


@pytest.fixture(autouse=True)
def hermetic_seal(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, fixed identities and dates, no editor, a private HOME
    and a private cache directory (no PATCHKIT_CACHE_DIR, XDG_CACHE_HOME or PATCHKIT_UPSTREAM
    of the user's); real releases come from :data:`RELEASE_STORE` through the fixtures.
    Ansible reads no ``ANSIBLE_*`` variable, ansible.cfg or ``~/.ansible`` of the user's: its
    home, temporary directories (local and on hosts) and config are in the private HOME."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("PATCHKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("PATCHKIT_UPSTREAM", raising=False)
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
    # no plain progress lines on the stderr tests read (they would depend on the machine's speed)
    monkeypatch.setenv("PATCHKIT_PROGRESS_AFTER", "off")
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    for name in [n for n in os.environ if n.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    for name, value in ansible_env(home).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def persistent_cache() -> Path:
    """The release store that outlives the test session (``wheels/``: downloaded SGLang
    wheels), shared by every test that needs a real release."""
    RELEASE_STORE.mkdir(parents=True, exist_ok=True)
    return RELEASE_STORE

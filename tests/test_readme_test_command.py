"""The README's test command (issue 25, item 17): `.ci/run` runs it as written, it shows
progress a person can read (a line per test file, not dots only, and the slowest tests at the
end), and the README says how long it takes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("Run the tests:", 1)[1]
    return re.search(r"```sh\n(.*?)\n```", section, re.DOTALL)[1].strip()


def test_ci_runs_the_readme_test_command_as_written() -> None:
    command = readme_test_command()
    assert "pytest" in command
    assert command in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_test_command_shows_progress_per_file_and_the_slowest_tests() -> None:
    pytest_args = shlex.split(readme_test_command().rsplit("&&", 1)[1])[3:]  # after `python -m pytest`
    assert not {"-q", "--quiet", "-qq"} & set(pytest_args), pytest_args  # -q: dots only
    assert any(a.startswith("--durations") for a in pytest_args), pytest_args


def test_the_readme_says_how_long_the_tests_take() -> None:
    after = (REPO / "README.md").read_text().split("Run the tests:", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\b(\d+|ten|fifteen) minutes on a quiet 2-core machine", after), after

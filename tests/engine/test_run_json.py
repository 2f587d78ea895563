"""The engine over JSON as the SSH agent drives it, and a real SGLang release laid out as an
installed package."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.engine import run
from patchkit.upstream import download_wheel

from .helpers import file_record, fix, git, request


def agent(req_text: str) -> dict:
    """A request as JSON text in, its result as JSON text out, as the agent on a host does."""
    return json.loads(json.dumps(run(json.loads(req_text))))


def test_agent_round_trip_keeps_non_utf8_bytes(checkout: Path) -> None:
    target = checkout / "python/sglang/srt/latin.py"
    target.write_bytes(b"name = 'caf\xe9'\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "latin-1 file")
    f = fix("a", [file_record("python/sglang/srt/latin.py", "name = 'caf\udce9'\n", "name = 'caf\udce9!'\n")],
            release=None)
    res = agent(json.dumps(request("apply", {"sglang": checkout}, [f])))
    assert res["ok"], res["error"]
    assert target.read_bytes() == b"name = 'caf\xe9!'\n"


def test_agent_reports_bad_input_as_an_error_result() -> None:
    res = agent(json.dumps(["not", "an", "object"]))
    assert res["ok"] is False and res["error"]["type"] == "UsageError"
    res = agent(json.dumps({"format": 9, "op": "apply"}))
    assert res["error"]["type"] == "UsageError" and "format 9" in res["error"]["message"]


def test_unexpected_exception_becomes_internal_error(checkout: Path) -> None:
    # (a state.json of the wrong shape is reported damaged, tests/test_hostile_surfaces.py;
    # a journal of the wrong shape still trips the recovery)
    req = request("rollback", {"sglang": checkout}, [])
    (checkout / ".patchkit").mkdir()
    (checkout / ".patchkit/journal.json").write_text(
        '{"format": 1, "txn": "t", "op": "apply", "fixes": 5}')
    res = run(req)
    assert res["ok"] is False and res["error"]["type"] == "InternalError"
    assert "Traceback" in res["error"]["details"]["traceback"]


@pytest.fixture(scope="session")
def sglang_wheel(persistent_cache: Path) -> Path:
    return download_wheel("0.5.21", persistent_cache / "wheels")


@pytest.mark.network
def test_real_release_installed_as_package(sglang_wheel: Path, tmp_path: Path) -> None:
    """A site-packages with the real release: layout mapping and release detection from its
    generated ``_version.py``; the patch is written against the checkout layout."""
    rel = "sglang/srt/utils/weight_versions.py"
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(sglang_wheel) as wheel:
        for name in ("sglang/__init__.py", "sglang/_version.py", rel):
            wheel.extract(name, site)
    original = (site / rel).read_bytes()
    text = original.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    lines.insert(len(lines) // 2, "# patched by patchkit")
    f = fix("real", [file_record("python/" + rel, text, "\n".join(lines))],
            verification=[{"kind": "python-syntax", "root": "sglang", "path": "python/" + rel}])
    res = run(request("apply", {"sglang": site}, [f]))
    assert res["ok"], res["error"]
    release = res["fixes"][0]["preconditions"][0]
    assert release["ok"] and release["detail"] == "release 0.5.21 (from sglang/_version.py)"
    assert b"# patched by patchkit" in (site / rel).read_bytes()
    assert run(request("rollback", {"sglang": site}, [f]))["ok"]
    assert (site / rel).read_bytes() == original


ENGINE = Path(__file__).resolve().parents[2] / "patchkit" / "engine"


def test_engine_is_python38_standard_library_only() -> None:
    """The engine is shipped to hosts with only their own Python (3.8+) and nothing installed."""
    import ast

    for source in sorted(ENGINE.glob("*.py")):
        tree = ast.parse(source.read_text(), str(source), feature_version=(3, 8))
        assert "from __future__ import annotations" in source.read_text(), source.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in sys.stdlib_module_names, (source.name, name)

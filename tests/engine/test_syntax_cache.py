"""python-syntax results kept by content in the user's cache (local targets only).

The key is the sha256 of the bytes that parsed, the file the interpreter's version: a file
whose bytes changed is parsed again, a failure is never remembered, and without a cache
directory (a remote host) nothing is kept.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import checks, run

from .helpers import MOD, file_record, fix, request

SYNTAX = [{"kind": "python-syntax", "root": "sglang", "path": MOD}]


def patched(checkout: Path, new: str) -> Dict[str, Any]:
    before = (checkout / MOD).read_text()
    return fix("a", [file_record(MOD, before, before.replace("return x + 7\n", new))],
               verification=SYNTAX)


def digests(cache: Path) -> List[str]:
    files = list(cache.glob("python-syntax-*"))
    return files[0].read_text().split() if files else []


def test_a_verified_content_is_remembered_and_not_parsed_again(
        checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    f = patched(checkout, "return x * 7\n")
    res = run(request("apply", {"sglang": checkout}, [f]), cache_dir=str(cache))
    assert res["ok"], res["error"]
    after = hashlib.sha256((checkout / MOD).read_bytes()).hexdigest()
    assert digests(cache) == [after]
    assert run(request("rollback", {"sglang": checkout}, [f]), cache_dir=str(cache))["ok"]

    parsed: List[str] = []
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda src, *a, **k: parsed.append(k.get("filename")) or real(src, *a, **k))
    res = run(request("apply", {"sglang": checkout}, [f]), cache_dir=str(cache))
    assert res["ok"] and res["fixes"][0]["verification"][0]["detail"] == "parses"
    assert parsed == []  # the same bytes: known to parse under this Python
    assert digests(cache) == [after]  # nothing added twice


def test_changed_bytes_are_parsed_and_a_failure_is_never_remembered(checkout: Path,
                                                                    tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    good = patched(checkout, "return x * 7\n")
    assert run(request("apply", {"sglang": checkout}, [good]), cache_dir=str(cache))["ok"]
    assert run(request("rollback", {"sglang": checkout}, [good]), cache_dir=str(cache))["ok"]
    original = (checkout / MOD).read_bytes()
    bad = patched(checkout, "return x *\n")  # a syntax error, bytes the cache never saw
    res = run(request("apply", {"sglang": checkout}, [bad]), cache_dir=str(cache))
    assert not res["ok"] and res["error"]["type"] == "VerificationFailed"
    assert "line" in res["error"]["details"]["failures"][0]["detail"]
    assert (checkout / MOD).read_bytes() == original  # restored
    assert len(digests(cache)) == 1  # only the content that parsed
    again = run(request("apply", {"sglang": checkout}, [bad]), cache_dir=str(cache))
    assert not again["ok"] and again["error"]["type"] == "VerificationFailed"


def test_without_a_cache_directory_nothing_is_kept(checkout: Path, tmp_path: Path) -> None:
    assert run(request("apply", {"sglang": checkout}, [patched(checkout, "return x * 7\n")]))["ok"]
    assert not list(tmp_path.rglob("python-syntax-*"))


def test_a_torn_or_foreign_line_is_ignored(tmp_path: Path) -> None:
    cache = checks.SyntaxCache(str(tmp_path))
    good, other = "a" * 64, "b" * 64
    Path(cache.path).write_text(good + "\n" + "c" * 10 + other[:30])  # a write cut short
    assert cache.known(good) and not cache.known(other) and not cache.known("c" * 10 + other[:30])
    cache.add(other)
    cache.save()
    fresh = checks.SyntaxCache(str(tmp_path))
    assert not fresh.known(other)  # glued to the torn line: not a 64-character line
    assert fresh.known(good)

"""Each version of a file's bytes is hashed once, however many records name its digest."""

from patchkit.engine import workspace
from patchkit.engine.paths import Roots
from patchkit.engine.workspace import Workspace


def test_each_version_of_a_file_is_hashed_once(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_bytes(b"x = 1\n")
    calls = []
    real = workspace.sha256_bytes
    monkeypatch.setattr(workspace, "sha256_bytes", lambda data: calls.append(data) or real(data))
    roots = Roots({"sglang": str(tmp_path)})
    e = Workspace(roots).entry("sglang", "a.py")
    original = e.original
    first = [e.sha256(e.original) for _ in range(3)]
    e.current = b"x = 2\n"
    second = [e.sha256(e.current) for _ in range(3)]
    assert e.sha256(original) == first[0]  # the original stays known beside the latest
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]
    assert calls == [b"x = 1\n", b"x = 2\n"]

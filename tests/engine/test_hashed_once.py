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


def test_an_apply_reads_each_file_once_and_hashes_each_version_once(tmp_path, monkeypatch):
    """Two fixes, the second changing a file the first changed: each target file is read
    once (the plan's read; not again for the result's digests once the bytes are written),
    and each of its versions (original, after the first fix, after the second) hashed once."""
    from patchkit.engine import run

    from .helpers import MOD, file_record, fix, make_checkout, module_text, request

    root = make_checkout(tmp_path)
    base = module_text()
    (root / MOD).write_text(base)
    assert "def f5(" in base and "def f30(" in base
    (root / "python/sglang/other.py").write_text("a = 1\n")
    one = base.replace("def f5(x):\n", "def f5(x):  # one\n")
    two = one.replace("def f30(x):\n", "def f30(x):  # two\n")
    reads, hashed = [], []
    real_read, real_hash = workspace.read_with_stat, workspace.sha256_bytes
    monkeypatch.setattr(workspace, "read_with_stat", lambda p: reads.append(p) or real_read(p))
    monkeypatch.setattr(workspace, "sha256_bytes", lambda d: hashed.append(d) or real_hash(d))
    result = run(request("apply", {"sglang": root}, [
        fix("a", [file_record(MOD, base, one), file_record("python/sglang/other.py", "a = 1\n", "a = 2\n")]),
        fix("b", [file_record(MOD, one, two, patch="0001-b.patch")])], git=False))
    assert result["ok"], result["error"]
    assert (root / MOD).read_text() == two
    assert sorted(reads) == sorted({str(root / MOD), str(root / "python/sglang/other.py")})
    versions = [base, one, two, "a = 1\n", "a = 2\n"]
    assert sorted(hashed) == sorted(v.encode() for v in versions)
    files = {(f["path"], f["before_sha256"], f["after_sha256"])
             for fx in result["fixes"] for f in fx["files"]}
    assert files == {(MOD, real_hash(base.encode()), real_hash(one.encode())),
                     (MOD, real_hash(one.encode()), real_hash(two.encode())),
                     ("python/sglang/other.py", real_hash(b"a = 1\n"), real_hash(b"a = 2\n"))}

"""A file is written to its temporary sibling, created with ``O_EXCL | O_NOFOLLOW``: whatever
already stands at that name (a crash's leftover, a planted symlink) is never opened or written
through; it is removed and the temporary file made anew."""

from __future__ import annotations

from pathlib import Path

from patchkit.engine import run

from .helpers import MOD, file_record, fix, make_checkout, request


def test_a_leftover_or_planted_temp_file_is_replaced_never_written_through(tmp_path: Path) -> None:
    root = make_checkout(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    init = root / "python" / "sglang" / "__init__.py"
    (init.parent / ".__init__.py.patchkit-tmp").symlink_to(outside)  # planted
    (root / "python" / "sglang" / "srt" / ".mod.py.patchkit-tmp").write_text("half a file")
    before = (root / MOD).read_text()
    after = before.replace("return x + 7\n", "return x * 7\n")
    records = [file_record(MOD, before, after),
               file_record("python/sglang/__init__.py", "", "X = 1\n", patch="0002-b.patch")]
    result = run(request("apply", {"sglang": root}, [fix("a", records)], git=False))
    assert result["ok"], result["error"]
    assert (root / MOD).read_text() == after and init.read_text() == "X = 1\n"
    assert outside.read_text() == "not yours\n"
    assert not list(root.rglob("*.patchkit-tmp"))

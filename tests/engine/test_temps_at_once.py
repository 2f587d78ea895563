"""The temporary files of a write are made several at once (docs/performance.md, "The drift
apply"): on the file system the benchmarks run on, making a file is most of a write's time,
and it overlaps. The renames still go one by one, in order. A failure, or a signal, while the
temporary files are made waits for every thread before anything is put back: no temporary
file is left, and the target is as it was."""

from __future__ import annotations

import errno
import signal
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import run
from patchkit.engine.fsops import in_threads
from patchkit.engine.rootfs import RootDirs

from .helpers import content_snapshot, file_record, fix, git, request
from .test_crash import leftovers

FILES = ["python/sglang/srt/m%02d.py" % i for i in range(12)]


def many(root: Path) -> Dict[str, Any]:
    """A fix that changes twelve files and creates one in a new directory."""
    records = []
    for rel in FILES:
        before = "".join("x%d = %d\n" % (i, i) for i in range(30))
        (root / rel).write_text(before)
        records.append(file_record(rel, before, before.replace("x7 = 7\n", "x7 = 70\n")))
    records.append(file_record("python/sglang/new/fresh.py", None, "FRESH = True\n"))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "twelve modules")
    return fix("a", records)


def test_two_temporary_files_are_in_the_making_at_once(checkout: Path, monkeypatch) -> None:
    """Before, each file's temporary file was made and renamed before the next was begun: two
    never met at this barrier, and the apply failed."""
    f = many(checkout)
    meet = threading.Barrier(2, timeout=30)
    real = RootDirs.write_temp
    met: List[bool] = []

    def meeting(self: RootDirs, *args: Any) -> None:
        if not met:
            meet.wait()  # a second file's temporary file is begun before this one is done
            met.append(True)
        real(self, *args)

    monkeypatch.setattr(RootDirs, "write_temp", meeting)
    res = run(request("apply", {"sglang": checkout}, [f]))
    assert res["ok"], res["error"]
    assert met
    assert all("x7 = 70\n" in (checkout / rel).read_text() for rel in FILES)
    assert (checkout / "python/sglang/new/fresh.py").read_text() == "FRESH = True\n"
    assert leftovers(checkout) == []


def test_a_temporary_file_that_fails_leaves_none_and_the_target_as_it_was(checkout: Path,
                                                                         monkeypatch) -> None:
    f = many(checkout)
    before = content_snapshot(checkout)
    real = RootDirs.write_temp

    def full_disk(self: RootDirs, root: str, rel: str, *args: Any) -> None:
        if rel == FILES[3]:
            raise OSError(errno.ENOSPC, "No space left on device")
        time.sleep(0.02)  # the others still in the making when it fails
        real(self, root, rel, *args)

    monkeypatch.setattr(RootDirs, "write_temp", full_disk)
    res = run(request("apply", {"sglang": checkout}, [f]))
    assert not res["ok"]
    assert "No space left on device" in res["error"]["message"], res["error"]
    assert FILES[3] in res["error"]["message"]  # the file it failed on, named
    assert leftovers(checkout) == []
    assert content_snapshot(checkout) == before
    assert not (checkout / ".patchkit/journal.json").exists()


def test_a_signal_while_temporary_files_are_made_waits_for_them_then_puts_all_back(
        checkout: Path, monkeypatch) -> None:
    """SIGTERM lands in the engine's thread while it waits for the threads making the
    temporary files: it stops them, waits for each to end, and only then puts the target
    back. Had it gone on at once, a thread could make a temporary file after the restore
    removed them all."""
    f = many(checkout)
    before = content_snapshot(checkout)
    real = RootDirs.write_temp
    sent: List[bool] = []
    lock = threading.Lock()

    def slow(self: RootDirs, *args: Any) -> None:
        with lock:
            sent.append(True)
            now = len(sent) == 9  # a thread's second file: every thread runs, the engine waits
        if now:  # to the engine's thread (os.kill may pick this one)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        time.sleep(0.1)  # still making it when the engine has the signal
        real(self, *args)

    monkeypatch.setattr(RootDirs, "write_temp", slow)
    res = run(request("apply", {"sglang": checkout}, [f]))
    assert not res["ok"] and res["error"]["type"] == "Terminated", res["error"]
    time.sleep(0.3)  # a thread still running would make its temporary file by now
    assert leftovers(checkout) == []
    assert content_snapshot(checkout) == before
    assert not (checkout / ".patchkit/journal.json").exists()


def test_in_threads_begins_nothing_after_a_failure_and_raises_the_first() -> None:
    begun: List[int] = []

    def work(i: int) -> None:
        begun.append(i)
        if i in (0, 5):
            raise ValueError(i)
        time.sleep(0.01)

    with pytest.raises(ValueError) as caught:
        in_threads(400, work)
    assert caught.value.args == (0,)  # the lowest of the failures
    assert len(begun) < 400

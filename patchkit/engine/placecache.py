"""Placed FILE records of earlier applies, by content: a repeat apply splices bytes instead of
placing hunks.

Placing a release's worth of hunks (split every file into lines, find each hunk's old side,
join the new text) is the largest part of a big apply, and it is a pure function of the FILE
record and the file's bytes. So a local target's apply keeps, per fix, what each record did to
each file it met: the sha256 of the bytes before and after, the byte ranges replaced with
their new bytes ("edits"), and the placements the result reports. The next apply of the same
records to a file with the same before-bytes replays the edits (a few slices joined, in C) and
checks that the result has the recorded sha256; any other file is placed as usual.

The key of a fix's entry is the sha256 of its FILE records exactly as the request carries them
(paths, ops, modes, hunk headers and bodies) and of this engine's placement code, so a changed
patch or a changed placer never meets an old entry. Only hits that reproduce the recorded
after-bytes are used, so a damaged cache file costs a placement, never a wrong byte. Like the
python-syntax cache it exists only for a local target (``engine.run(cache_dir=...)``); the agent
shipped to a remote host is given no cache directory and keeps nothing.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from .fsops import code_stamp
from .hunks import FileChange, Placement, sha256_bytes

# (before sha256, after sha256, edits, placements, diff): edits are (start, end, new bytes)
# byte ranges of the before-bytes; placements (index, expected_line, line, offset) of each
# hunk; diff the record's own diff at those lines (``workspace.placed_diff``) or None.
Edits = List[Tuple[int, int, bytes]]
Record = Tuple[Optional[str], Optional[str], Edits, List[Tuple[int, int, int, int]], Optional[str]]

class PlaceCache:
    """One file per fix under ``<cache_dir>/placed/<code stamp>/<records sha256>``."""

    def __init__(self, cache_dir: str) -> None:
        here = os.path.dirname(os.path.abspath(__file__))  # the placement code's identity
        self.dir = os.path.join(cache_dir, "placed", code_stamp(
            os.path.join(here, "hunks.py"), os.path.join(here, "placecache.py")))

    @staticmethod
    def key(files: Tuple[FileChange, ...]) -> Optional[str]:
        """The sha256 of the records as the request carried them; None when they were not
        built from a request (no raw form to hash)."""
        raw = []
        for change in files:
            source = change.source
            if not isinstance(source, list):
                return None
            raw.append((change.root, change.path, change.patch, change.op, change.mode, source[0]))
        try:
            return hashlib.sha256(marshal.dumps(raw)).hexdigest()
        except ValueError:  # an object marshal cannot write: nothing to key it by
            return None

    def load(self, key: str) -> Dict[int, Record]:
        try:
            with open(os.path.join(self.dir, key), "rb") as fh:
                data = marshal.loads(fh.read())
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        return data if isinstance(data, dict) else {}

    def save(self, key: str, records: Dict[int, Record]) -> None:
        """Best effort and atomic: a cache that cannot be written only makes the next run slower."""
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.dir)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(marshal.dumps(records))
                os.replace(tmp, os.path.join(self.dir, key))
            except BaseException:
                os.unlink(tmp)
                raise
        except (OSError, ValueError):
            pass


def replay(record: Any, change: FileChange, before: Optional[bytes]
           ) -> Optional[Tuple[Optional[bytes], List[Placement], Optional[str]]]:
    """The after-bytes, placements and diff of ``change`` on ``before`` from a cached record,
    or None when the record is not for these bytes or does not reproduce its after-bytes."""
    try:
        before_sha, after_sha, edits, placed, diff = record
        if diff is not None and not isinstance(diff, str):
            return None
        if sha256_bytes(before) != before_sha:
            return None
        if after_sha is None:
            after = None
        else:
            base = before or b""
            parts: List[bytes] = []
            prev = 0
            for start, end, new in edits:
                if not prev <= start <= end <= len(base):
                    return None
                parts.append(base[prev:start])
                parts.append(new)
                prev = end
            parts.append(base[prev:])
            after = b"".join(parts)
            if sha256_bytes(after) != after_sha:
                return None
        return after, [Placement(change.patch, i, expected, line, offset)
                       for i, expected, line, offset in placed], diff
    except (TypeError, ValueError):
        return None


def record(before: Optional[bytes], before_text: Optional[str], after: Optional[bytes],
           text_edits: List[Tuple[int, int, str]], placed: List[Placement],
           diff: Optional[str]) -> Record:
    """A cache record of one placement; ``text_edits`` are offsets in ``before_text`` (the
    decoded before-bytes)."""
    enc = lambda s: s.encode("utf-8", "surrogateescape")  # noqa: E731
    if before is not None and text_edits and not before.isascii():
        # offsets in characters differ from bytes: count the bytes of each stretch once
        assert before_text is not None
        edits = []
        at = pos = 0  # a character offset and the byte offset of the same place
        for start, end, new in text_edits:
            pos += len(enc(before_text[at:start]))
            old = len(enc(before_text[start:end]))
            edits.append((pos, pos + old, enc(new)))
            at, pos = end, pos + old
    else:
        edits = [(s, e, enc(new)) for s, e, new in text_edits]
    return (sha256_bytes(before), sha256_bytes(after), edits,
            [(p.index, p.expected_line, p.line, p.offset) for p in placed], diff)

"""git format-patch directories and mbox files, read into :class:`Patch` records and written
so that ``git am`` applies them (stdlib ``email`` for the headers; the diff kept byte-exact)."""

from __future__ import annotations

import email
import email.header
import email.policy
import re
from email.utils import format_datetime, parseaddr
from pathlib import Path

from ..errors import PatchFormatError
from . import Patch, read_regular, refuse_crlf, split_diff, strip_signature

#: The line opening each message of an mbox (git format-patch writes a fixed date).
FROM_LINE = re.compile(rb"^From [^\s]+ .*\d{4}\r?$")
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.*)$")


def read(path: Path) -> list[Patch]:
    """The patches of an mbox file or of a git format-patch directory (its ``*.patch`` files,
    by name), in order; a cover letter (``0000-cover-letter.patch``) is skipped."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".patch", ".eml", ".mbox")
                       and p.is_file() and p.name != "0000-cover-letter.patch")
        if not files:
            raise PatchFormatError(f"{path}: no *.patch files in the directory. Give a "
                                   "git format-patch output directory or an mbox file",
                                   file=str(path))
        return [patch for f in files for patch in _read_file(f)]
    return _read_file(path)


def _read_file(path: Path) -> list[Patch]:
    data = read_regular(path, "the mbox")
    # Each message's lines are joined once (appending to a bytes object copied it whole per
    # line: an import took time in the square of the mbox's size).
    chunks: list[list[bytes]] = []
    starts: list[int] = []  # the line of the file each message's first line is
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        is_from = line.startswith(b"From ") and FROM_LINE.match(line.rstrip(b"\n"))
        if is_from or not chunks:
            chunks.append([] if is_from else [line])
            starts.append(number + 1 if is_from else number)
        else:
            chunks[-1].append(line)
    del data
    out = []
    for i, (lines, start) in enumerate(zip(chunks, starts), 1):
        chunk = b"".join(lines)
        lines.clear()
        if chunk.strip():
            out.append(_message(path, chunk, i, start))
    if not out:
        raise PatchFormatError(f"{path}: no message in the mbox. Give the output of git "
                               "format-patch (or a mail holding a patch)", file=str(path))
    return out


def _header(path: Path, msg: email.message.Message, name: str, index: int) -> str:
    raw = next((v for k, v in msg.raw_items() if k.lower() == name.lower()), None)
    if raw is None:
        return ""
    raw = re.sub(r"\r?\n[ \t]+", " ", str(raw))
    try:  # raw 8-bit UTF-8 (what some mailers send) as well as RFC 2047
        raw = raw.encode("ascii", "surrogateescape").decode("utf-8")
        return str(email.header.make_header(email.header.decode_header(raw))).strip()
    except (UnicodeError, LookupError, email.errors.HeaderParseError):
        raise _not_utf8(path, index, name) from None


def _not_utf8(path: Path, index: int, name: str) -> PatchFormatError:
    return PatchFormatError(
        f"{path}: message {index}: its {name} header is not UTF-8 (nor valid RFC 2047). "
        f"Re-encode the file as UTF-8 (iconv -f LATIN1 -t UTF-8 {path.name}) or export it "
        "again with git format-patch", file=str(path), header=name)


def _message(path: Path, chunk: bytes, index: int, start: int = 1) -> Patch:
    """Message ``index`` of ``path``, whose first line is the file's line ``start``."""
    text = chunk.decode("utf-8", "surrogateescape")
    refuse_crlf(text, path)
    name = "From"
    for line in re.split(rb"\r?\n", chunk.split(b"\n\n", 1)[0]):
        name = line.split(b":", 1)[0].decode("ascii", "replace") if line[:1].isalpha() else name
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise _not_utf8(path, index, name) from None
    msg = email.message_from_bytes(chunk, policy=email.policy.compat32)
    if msg.defects and not msg.get("Subject"):
        raise _malformed(path, index, "its mail headers cannot be read")
    subject = _header(path, msg, "Subject", index)
    if not subject or msg.is_multipart():
        raise _malformed(path, index, "it has no Subject header" if not subject else
                         "it is a multipart mail (an attachment)")
    payload = msg.get_payload(decode=True)
    if not isinstance(payload, bytes):
        raise _malformed(path, index, "its body cannot be read")
    at = 1  # the file's line the diff starts at: known when the body is the file's own text
    if msg.get("Content-Transfer-Encoding", "").lower() in ("", "7bit", "8bit", "binary"):
        head, blank, payload = chunk.partition(b"\n\n")
        payload = payload if blank else b""
        at = start + head.count(b"\n") + 2
    body_text = payload.decode("utf-8", "surrogateescape")
    message, diff = split_diff(body_text, path)
    at = at + message.count("\n") if at > 1 else 1
    message = re.split(r"^---[ \t]*$", message, maxsplit=1, flags=re.M)[0]
    body, trailers = split_trailers(message)
    author = ""
    if msg.get("From"):
        name, addr = parseaddr(_header(path, msg, "From", index))
        author = f"{name} <{addr}>" if name else f"{addr} <{addr}>" if addr else ""
    subject = re.sub(r"^(\s*\[[^\]]*\]\s*)+", "", subject).strip()
    return Patch(path, subject, body, author, _header(path, msg, "Date", index), trailers,
                 strip_signature(diff), diff_line=at)


def _malformed(path: Path, index: int, what: str) -> PatchFormatError:
    return PatchFormatError(f"{path}: message {index} is not a patch mail: {what}. Give the "
                            "output of git format-patch, one patch per message",
                            file=str(path), number=index)


def split_trailers(message: str) -> tuple[str, list[tuple[str, str]]]:
    """(body, trailers) of a commit message body: trailers are its last paragraph when every
    line of it is ``Key: value``."""
    text = message.strip("\n")
    head, sep, last = text.rpartition("\n\n")
    lines = last.split("\n")
    if last and all(_TRAILER.match(line) for line in lines):
        return head.strip("\n") if sep else "", [
            (m[1], m[2].strip()) for m in map(_TRAILER.match, lines) if m]
    return text, []


def message(author: str, date: str, subject: str, body: str, trailers: list[tuple[str, str]],
            diff: str, *, number: int = 1, total: int = 1) -> str:
    """One mail of a git format-patch mbox, UTF-8 and 8bit, as ``git am`` reads it."""
    tag = "[PATCH]" if total == 1 else f"[PATCH {number}/{total}]"
    paragraphs = [p for p in (body.strip("\n"),
                              "\n".join(f"{k}: {v}" for k, v in trailers)) if p]
    return ("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: {_encode(author)}\n" + (f"Date: {date}\n" if date else "")
            + f"Subject: {_encode(f'{tag} {subject}')}\n"
            "MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\n"
            "Content-Transfer-Encoding: 8bit\n\n"
            + "\n\n".join(paragraphs) + "\n---\n" + diff
            + ("" if diff.endswith("\n") else "\n") + "-- \npatchkit\n\n")


def _encode(value: str) -> str:
    """A header value: as is when ASCII, else RFC 2047 UTF-8 (git am decodes it)."""
    if value.isascii():
        return value
    name, addr = parseaddr(value) if "<" in value else ("", "")
    if addr and name:
        return f"{email.header.Header(name, 'utf-8').encode()} <{addr}>"
    return email.header.Header(value, "utf-8", maxlinelen=998).encode()


def rfc2822(iso_date: str) -> str:
    """A changelog date (YYYY-MM-DD) as a mail's Date, at midnight UTC."""
    import datetime as _dt
    day = _dt.date.fromisoformat(iso_date)
    return format_datetime(_dt.datetime(day.year, day.month, day.day, tzinfo=_dt.timezone.utc))


__all__ = ["read", "message", "split_trailers", "rfc2822"]

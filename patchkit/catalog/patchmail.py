"""A series file's mail header, read and written here only (docs/authoring.md): ``From``,
``Date``, ``Subject: [PATCH] ...``, a blank line, the patch's message, ``---``, then the diffs.

It is read with the stdlib ``email`` parser (an mbox ``From`` line, folded headers and the
headers' order as a mail reader takes them). It is written in git format-patch's form, raw
UTF-8, by :func:`render`: the stdlib's generator would re-render a Date, fold long lines and
RFC 2047-encode names, and a refreshed series keeps its header byte for byte."""

from __future__ import annotations

import re

from ..engine.recordbase import Record, record_dataclass

#: The From of a patch when nobody is known (``refresh`` replaces it with the fix's author).
PLACEHOLDER_AUTHOR = "patchkit <fixes@patchkit.invalid>"
#: The line that starts each mail of an mbox (git format-patch writes ``From <sha> <date>``).
MBOX_FROM = re.compile(r"From \S+ +(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|"
                       r"Aug|Sep|Oct|Nov|Dec) +\d+ \d\d:\d\d:\d\d \d{4}$")
#: The line that ends a patch's message (a diffstat may follow it, then the diffs).
MESSAGE_END = re.compile(r"^---[ \t]*$", re.M)
_PATCH_TAG = re.compile(r"^(\s*\[PATCH[^\]]*\]\s*)?")
_DIFF = "diff --git "


@record_dataclass(frozen=True)
class Header(Record):
    """What a series file says about its patch besides the diff."""

    subject: str
    body: str = ""
    author: str = PLACEHOLDER_AUTHOR
    date: str | None = None  # RFC 2822, as in a mail; None: no Date line
    has_subject: bool = True  # False: the file had no Subject (``subject`` is the default)
    mbox_from: str = ""  # the mbox ``From <sha> <date>`` line it started with, if any


#: git format-patch's signature after the last diff: ``-- `` and git's version.
_SIGNATURE = re.compile(r"\n(-- \n\d[\w.+-]*\n\n?)\Z")  # no hunk line starts with a digit


def render(head: Header) -> str:
    """The header of a series file, up to and including its ``---`` line."""
    date = f"Date: {head.date}\n" if head.date else ""
    body = head.body.strip() + "\n" if head.body.strip() else ""
    mbox = f"{head.mbox_from}\n" if head.mbox_from else ""
    return f"{mbox}From: {head.author}\n{date}Subject: [PATCH] {head.subject}\n\n{body}---\n"


def signature(text: str) -> str:
    """The format-patch signature ending a series file (``-- \\n2.43.0\\n``), "" for none: a
    rewritten series ends with it again."""
    found = _SIGNATURE.search(text)
    return found.group(1) if found else ""


def split(text: str) -> tuple[str, str]:
    """(header, diffs) of a series file: the header is what precedes the first ``diff --git``
    ("" when there is none: the whole text is diffs)."""
    cut = text.find(_DIFF)
    return (text[:cut], text[cut:]) if cut >= 0 else ("", text)


def read(text: str, default_subject: str = "") -> Header:
    """The header of a series file (all of ``text`` before its first ``diff --git`` line):
    Subject without its ``[PATCH ...]`` tag, the message up to ``---``, From and Date. A file
    with no Subject gets ``default_subject`` and no message."""
    head = text.split("\n" + _DIFF, 1)[0]
    first, _nl, rest = head.partition("\n")
    mbox = first if MBOX_FROM.match(first) else ""
    head = rest if mbox else head
    import email.parser  # here: the apply path reads series without parsing mail
    import email.policy

    msg = email.parser.HeaderParser(policy=email.policy.compat32).parsestr(head)
    found: dict = {}
    for key, name in (("author", "From"), ("date", "Date")):
        value = msg.get(name)
        if value is not None:
            found[key] = _unfold(value)
    if mbox:
        found["mbox_from"] = mbox
    subject = msg.get("Subject")
    if subject is None:
        return Header(default_subject, has_subject=False, **found)
    payload = msg.get_payload()
    body = MESSAGE_END.split(payload if isinstance(payload, str) else "", maxsplit=1)[0]
    return Header(_PATCH_TAG.sub("", _unfold(subject)).strip(), body.strip(), **found)


def _unfold(value: str) -> str:
    return re.sub(r"\r?\n[ \t]+", " ", str(value)).strip()


__all__ = ["Header", "MBOX_FROM", "MESSAGE_END", "PLACEHOLDER_AUTHOR", "read", "render", "signature",
           "split"]

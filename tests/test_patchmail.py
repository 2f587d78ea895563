"""A series file's mail header (patchkit.catalog.patchmail): written in git format-patch's form
byte for byte, read back with the stdlib email parser as a mail reader reads it."""

from __future__ import annotations

from patchkit.catalog import patchmail
from patchkit.catalog.patchmail import PLACEHOLDER_AUTHOR, Header

DIFF = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def test_a_header_reads_back_as_written_byte_for_byte() -> None:
    head = Header("pool: ünï «x»,  two spaces", "Why.\n\nMore.", "Zoë, Q. <z@example.org>",
                  "Thu, 01 Oct 2026 00:00:00 +0000")
    text = patchmail.render(head) + DIFF
    assert text.startswith("From: Zoë, Q. <z@example.org>\nDate: Thu, 01 Oct 2026 00:00:00 "
                           "+0000\nSubject: [PATCH] pool: ünï «x»,  two spaces\n\nWhy.\n\nMore.\n"
                           "---\ndiff --git ")
    assert patchmail.read(text) == head
    assert patchmail.render(patchmail.read(text)) + DIFF == text
    assert patchmail.split(text) == (patchmail.render(head), DIFF)
    bare = patchmail.render(Header("t"))
    assert bare == f"From: {PLACEHOLDER_AUTHOR}\nSubject: [PATCH] t\n\n---\n"


def test_a_git_format_patch_mail_is_read_as_a_mail() -> None:
    """The mbox From line, a folded Subject (git folds long ones), MIME headers after it and a
    diffstat after ``---``."""
    text = ("From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001\n"
            "From: Ada <ada@example.org>\nDate: Tue, 7 Jul 2026 20:59:13 -0700\n"
            "Subject: [PATCH 2/3] Increase the KV cache pool when using indexShare by\n"
            " 15% (#30310)\nMIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\n\n"
            "Measured.\n\nSigned-off-by: Ada <ada@example.org>\n---\n x.py | 2 +-\n\n" + DIFF)
    head = patchmail.read(text, "default")
    assert head == Header("Increase the KV cache pool when using indexShare by 15% (#30310)",
                          "Measured.\n\nSigned-off-by: Ada <ada@example.org>",
                          "Ada <ada@example.org>", "Tue, 7 Jul 2026 20:59:13 -0700",
                          mbox_from=text.split("\n", 1)[0])
    assert patchmail.MBOX_FROM.match(text.split("\n", 1)[0])
    assert patchmail.render(head).startswith(text.split("\n", 1)[0] + "\nFrom: Ada")  # kept


def test_a_patch_without_subject_takes_the_default_and_no_message() -> None:
    dep3 = "Description: a fix\nAuthor: Q <q@example.org>\n---\n" + DIFF
    assert patchmail.read(dep3, "the title") == Header("the title", has_subject=False)
    assert patchmail.read(DIFF, "t") == Header("t", has_subject=False)
    assert patchmail.split(DIFF) == ("", DIFF)

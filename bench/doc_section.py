"""Replace one benchmark's section of docs/performance.md, leaving the others alone."""

from __future__ import annotations

from pathlib import Path

PREAMBLE = ("# Performance\n\nBenchmarks live in `bench/` (see bench/README.md); figures are "
            "from one run.\n\n")


def write_section(doc: Path, section: str) -> None:
    """Put ``section`` (starting with its ``## `` heading) in ``doc`` in place of the section
    with the same heading, up to the next ``## ``; appended when there is none."""
    heading = section.split("\n", 1)[0]
    text = doc.read_text() if doc.exists() else PREAMBLE
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        rest = "\n" + text[end + 1:] if end >= 0 else ""
        text = text[:start] + section.rstrip("\n") + "\n" + rest
    doc.write_text(text)

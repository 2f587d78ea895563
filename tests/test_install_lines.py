"""Every install line the docs and messages give installs this project (issue 25, item 1).

The name ``patchkit`` on the package index belongs to another project, so the distribution is
named in ``pyproject.toml`` and every ``pip install`` a user can copy (README.md, docs/*.md, the
messages and the collection's docs in the package) installs it from a clone (``.``, ``-e .``,
``'.[fleet]'``), a built wheel, or that name. Any other requirement must be a project we mean
to install beside it (SGLang itself).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import tomlkit

REPO = Path(__file__).resolve().parent.parent
OTHERS = {"sglang"}  # projects the docs install on purpose, beside ours
DISTRIBUTION = tomlkit.parse((REPO / "pyproject.toml").read_text())["project"]["name"]
# `pip install` up to the end of its command: a closing backtick or quote-less line end.
INSTALL = re.compile(r"pip3? install\b([^`\n]*(?:\\\n[^`\n]*)*)")


def sources() -> list[Path]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    package = [p for p in sorted((REPO / "patchkit").rglob("*")) if p.suffix in (".py", ".md")]
    return docs + package + [REPO / ".ci" / "run"]


def requirements(args: str) -> list[str]:
    command = args.replace("\\\n", " ").split("#")[0].split("&&")[0].split(";")[0]
    try:
        words = shlex.split(command)
    except ValueError:  # a message's quote around the command, e.g. "...: pip install 'x'"
        words = [w.strip("'\"") for w in command.split()]
    out, skip = [], False
    for word in words:
        if word in ("or", "and", "then", "where", "from", "%") or word.startswith("("):
            break  # the prose after a command quoted in a sentence
        if word.endswith(")"):
            out.append(word.rstrip(")"))
            break
        if skip:
            skip = False
        elif word in ("-r", "--requirement", "-c", "--constraint", "--find-links", "-f",
                      "--index-url", "-i", "-w", "--target", "-t"):
            skip = True
        elif word == "-e" or word.startswith("-"):
            continue
        else:
            out.append(word)
    return out


def ours(req: str) -> bool:
    if req.startswith((".", "/", "$", "~")) or req.endswith(".whl") or ".whl" in req:
        return True  # a clone (with or without extras) or a built wheel
    name = re.split(r"[\[=<>!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")
    # `patchkit` on the index is another project ("apply and revert patches on models")
    return name != "patchkit" and (name == DISTRIBUTION or name in OTHERS)


def test_the_distribution_is_not_the_name_another_project_holds() -> None:
    assert DISTRIBUTION != "patchkit"
    text = (REPO / "pyproject.toml").read_text()
    assert 'patchkit = "patchkit.cli:entry"' in text  # the command keeps its name


def test_every_install_line_installs_our_distribution() -> None:
    wrong, seen = [], 0
    for path in sources():
        text = path.read_text(errors="replace")
        for match in INSTALL.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for req in requirements(match.group(1).strip(" '\"()")):
                seen += 1
                if not ours(req.strip("'\",")):
                    wrong.append(f"{path.relative_to(REPO)}:{line}: {req}")
    assert seen >= 5  # the scan found the install lines
    assert not wrong, "install lines that install another project:\n" + "\n".join(wrong)


def test_the_docs_name_the_distribution_where_they_install_it() -> None:
    for rel in ("README.md", "docs/fleet.md", "docs/containers.md"):
        text = (REPO / rel).read_text()
        assert DISTRIBUTION in text or "_".join(DISTRIBUTION.split("-")) in text, rel

"""``apply --commit`` and the rollback of a committed fix: one commit per fix and root, made
inside the transaction, which puts HEAD back on a failure or crash (docs/git.md)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import PreconditionFailed
from .gitops import Checkout, checkout_of, identity_env
from .paths import Roots


@dataclass(frozen=True)
class Change:
    """One file of one fix: its repo path, bytes after the fix (None: deleted) and mode."""

    repo_path: str
    data: Optional[bytes]
    mode: Optional[int]


@dataclass(frozen=True)
class Item:
    """One commit to make: a fix's files in one root."""

    fix: str
    root: str
    message: str
    changes: Tuple[Change, ...]


def checkouts(roots: Roots, names: Sequence[str]) -> Dict[str, Checkout]:
    """The roots among ``names`` that are git checkouts with a commit at HEAD."""
    out: Dict[str, Checkout] = {}
    for name in names:
        co = checkout_of(roots.get(name).path)
        if co is not None and co.head() is not None:
            out[name] = co
    return out


def journal_entries(cos: Dict[str, Checkout], items: List[Item]) -> List[Dict[str, Any]]:
    """What the journal keeps to undo the commits: each root's HEAD before, and its paths."""
    out = []
    for name, co in cos.items():
        paths = sorted({c.repo_path for it in items if it.root == name for c in it.changes})
        if paths:
            out.append({"root": name, "head": co.head(), "paths": paths})  # no path: roots move
    return out


def make(cos: Dict[str, Checkout], items: List[Item], entries: List[Dict[str, Any]],
         txn: str) -> Dict[str, List[Dict[str, str]]]:
    """Write the commits and move HEAD of each root; the {fix: [{root, sha}]} made."""
    made: Dict[str, List[Dict[str, str]]] = {}
    for entry in entries:
        co = cos[entry["root"]]
        env = identity_env(co)
        parent = entry["head"]
        with tempfile.TemporaryDirectory(prefix="patchkit-index-") as tmp:
            ienv = dict(env, GIT_INDEX_FILE=os.path.join(tmp, "index"))
            co.run(["read-tree", parent], env=ienv)
            for it in [it for it in items if it.root == entry["root"]]:
                for c in it.changes:
                    if c.data is None:
                        co.run(["update-index", "--force-remove", "--", c.repo_path], env=ienv)
                    else:
                        mode = "100755" if (c.mode or 0) & 0o111 else "100644"
                        blob = co.run(["hash-object", "-w", "--stdin"], stdin=c.data).decode().strip()
                        co.run(["update-index", "--add", "--cacheinfo",
                                "%s,%s,%s" % (mode, blob, c.repo_path)], env=ienv)
                tree = co.run(["write-tree"], env=ienv).decode().strip()
                message = "%s\nPatchkit-Txn: %s\n" % (it.message.rstrip("\n"), txn)
                parent = co.run(["commit-tree", tree, "-p", parent, "-F", "-"], env=env,
                                stdin=message.encode("utf-8")).decode().strip()
                made.setdefault(it.fix, []).append({"root": it.root, "sha": parent})
        co.run(["update-ref", "-m", "patchkit: %s" % txn, "HEAD", parent, entry["head"]])
        co.run(["reset", "-q", "--"] + entry["paths"])  # the index now agrees with HEAD and disk
    return made


def undo(journal: Dict[str, Any], roots: Roots) -> None:
    """Put HEAD back where the journal found it, if only this transaction's commits moved it."""
    txn = journal.get("txn")
    names = {r.name for r in roots}
    for entry in journal.get("git_commits") or []:
        where = roots.get(entry["root"]).path if entry.get("root") in names else entry.get("top")
        co = checkout_of(where) if where else None
        if co is None:
            continue
        head = co.head()
        if head and head != entry["head"]:
            ours = co.run(["log", "--format=%H %(trailers:key=Patchkit-Txn,valueonly,separator=)",
                           "%s..%s" % (entry["head"], head)]).decode().splitlines()
            if ours and all(ln.split(" ", 1)[1:] == [txn] for ln in ours) and \
                    co.is_ancestor(entry["head"], head):
                co.run(["update-ref", "HEAD", entry["head"], head])
        co.run(["reset", "-q", "--"] + list(entry["paths"]))


def message(title: str, rationale: str, name: str, version: int, patches: Sequence[Dict[str, Any]],
            extra: Sequence[str] = ()) -> str:
    lines = [title.strip(), ""] + ([rationale.strip(), ""] if rationale.strip() else []) + list(extra)
    lines.append("Patchkit-Fix: %s v%d" % (name, version))
    lines += ["Patchkit-Patch: %s sha256:%s" % (p.get("file"), p.get("sha256")) for p in patches]
    return "\n".join(lines) + "\n"


def refuse_unrecorded(fix: str, commits: List[Dict[str, str]], cos: Dict[str, Checkout]) -> None:
    """A committed fix can only be reverted while its commit is in HEAD's history."""
    for c in commits:
        co = cos.get(c["root"])
        if co is None or not co.is_ancestor(c["sha"]):
            raise PreconditionFailed(
                "fix %s was committed as %s in root %s, but that commit is not in the history of "
                "HEAD any more (reset or rebased away?); roll back with --force to restore the "
                "bytes kept at apply instead" % (fix, c["sha"][:12], c["root"]),
                fix=fix, commit=c["sha"], root=c["root"])

"""Which variant of a fix a target gets: the one serving the release it runs (docs/manifest.md,
"[[variants]]"), chosen here, next to the files, so one request serves every release of a
fleet; whether the fix is upstream in that release already (``not-needed``); and the release a
root runs (``detect_release``: its version file, else its git tag)."""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from .paths import Root, Roots

Releases = Dict[str, Tuple[Optional[str], str]]  # root name -> (release, where it was read)


_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(?:([a-z]+)(\d*))?(?:\.post(\d+))?\Z")


def release_key(release: str) -> Tuple[Any, ...]:
    """The one order of release names, PEP 440's (the client's ``packaging`` agrees, tested):
    0.5.9 < 0.5.22 < 0.5.23rc1 < 0.5.23 = 0.5.23.0 < 0.5.23.post1 < 0.5.23.post10. A name that
    is no release sorts first, by its text."""
    m = _RELEASE.match(release)
    if not m:
        return ((), 0, "", 0, -1, release)
    numbers = [int(p) for p in m.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:  # 1.0 is 1.0.0
        numbers.pop()
    tag, post = m.group(2), m.group(4)
    return (tuple(numbers), 0 if tag else 1, tag or "", int(m.group(3) or 0),
            -1 if post is None else int(post), "")


def release_of(roots: Roots, name: str, cache: Releases, git: bool) -> Optional[str]:
    """The release root ``name`` runs, read once per request (None: unknown or no such root)."""
    if name not in {r.name for r in roots}:
        return None
    if name not in cache:
        cache[name] = detect_release(roots.get(name), git=git)
    return cache[name][0]


def choose(data: Dict[str, Any], roots: Roots, cache: Releases, git: bool) -> Dict[str, Any]:
    """The FIX ``data`` as its variant for the target's release: the top level when it serves
    that release or none does (its release precondition then names every variant)."""
    variants = data.get("variants")
    since = data.get("upstream_since")
    if not variants and not since:
        return data
    release = data.get("release") or {}
    found = release_of(roots, str(release.get("root") or "sglang"), cache, git)
    out = dict(data)
    out.pop("variants", None)
    if isinstance(variants, list) and variants:
        served: List[Tuple[Any, List[str]]] = [(data.get("version"), list(release.get("versions") or []))]
        served += [(v.get("version"), list((v.get("release") or {}).get("versions") or []))
                   for v in variants if isinstance(v, dict)]
        out["variants_known"] = served
        pick = next((v for v in variants if isinstance(v, dict) and found is not None
                     and found in ((v.get("release") or {}).get("versions") or [])), None)
        if pick is not None and found not in (release.get("versions") or []):
            out.update(pick)
    if since and found is not None and release_key(found) >= release_key(str(since)):
        out["not_needed"] = "in upstream since %s (the target runs %s)" % (since, found)
    return out


_VERSION_RE = re.compile(
    r"""^(?:__version__|version)\b[^=\n]*=\s*(?:(?:__version__|version)\s*=\s*)?['"]([^'"]+)['"]""",
    re.MULTILINE)


def detect_release(root: Root, read: Optional[Callable[[str], Optional[bytes]]] = None,
                   git: bool = True) -> Tuple[Optional[str], str]:
    """The SGLang release of a root and where it was read from; ``read`` gives a version
    file's bytes by root-relative path (default: the disk; authoring passes HEAD's); without
    ``git`` no tag is asked for."""
    pkg = root.package_dir()
    if pkg:
        for name in ("_version.py", "version.py"):
            rel = os.path.relpath(os.path.join(pkg, name), root.path)
            data = read(rel) if read else _read_file(os.path.join(root.path, rel))
            match = None if data is None else _VERSION_RE.search(data.decode("utf-8", "replace"))
            if match:
                return match.group(1), rel
    if not git:
        return None, ""
    from . import gitcli  # here: a tree with a version file (a status, mostly) runs no git

    tag = gitcli.describe_tag(root.path)
    return (tag, "git tag of HEAD") if tag else (None, "")


def _read_file(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None

"""Pristine proof for an installed SGLang: the ``sglang-X.dist-info/RECORD`` pip wrote next to
the package lists the sha256 of every file the wheel installed (docs/design.md, "Automatic
preconditions"). Standard library only: the engine runs on hosts."""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import field
from typing import Any, Dict, List, Optional, Set, Tuple

from ..errors import TargetError
from .fsops import NotRegular, read_regular
from .paths import PACKAGE, Root, Roots
from .recordbase import Record, record_dataclass

DIST = "sglang"


@record_dataclass(frozen=True)
class Installed(Record):
    """The installed distribution that owns a root's package: its version and RECORD."""

    version: str
    record_path: str  # relative to the root (site-packages)
    hashes: Dict[str, str] = field(default_factory=dict)  # root-relative path -> hex, "" if none
    # RECORD's inode and mtime: pip writes it anew on every install, so an unchanged stamp
    # says the package was not reinstalled (a file the wheel's bytes again was restored by hand)
    stamp: str = ""

    @property
    def label(self) -> str:
        return "%s %s" % (DIST, self.version)

    def hexdigest(self, rel: str) -> Optional[str]:
        """The hex sha256 RECORD gives ``rel``; "" when listed without a hash; None: not listed."""
        return self.hashes.get(rel)


def _hex(entry: str) -> str:
    """``sha256=<urlsafe base64, no padding>`` as hex ("" for another or no algorithm)."""
    import base64  # here, as csv below: only an installed package's RECORD needs them

    algo, _, digest = entry.partition("=")
    if algo != "sha256" or not digest:
        return ""
    try:
        return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    except (ValueError, TypeError):
        return ""


def installed(root: Root) -> Optional[Installed]:
    """The wheel install of ``sglang`` whose package is this root's (site-packages layout),
    or None: not an installed package, an editable install (its RECORD lists no package
    files: the checkout it points at has git instead), or no readable RECORD. Two installs
    listing the package (``pip install --upgrade --target`` leaves the old dist-info behind)
    are told apart by the package's own version file; one it does not settle is refused
    (:func:`_the_one`), never taken for no install, which would drop the RECORD check."""
    if root.layout != PACKAGE:
        return None
    try:
        names = os.listdir(root.path)
    except OSError:
        return None
    found = []
    for name in names:
        stem, ext = os.path.splitext(name)
        dist, _, version = stem.partition("-")
        if ext != ".dist-info" or dist.lower().replace("-", "_") != DIST or not version:
            continue
        if _editable(os.path.join(root.path, name)):
            continue
        path = os.path.join(root.path, name, "RECORD")
        hashes = _read_record(path)
        if hashes and "sglang/__init__.py" in hashes:
            found.append(Installed(version, name + "/RECORD", hashes, _stamp(path)))
    return found[0] if len(found) == 1 else _the_one(root, found) if found else None


def _the_one(root: Root, found: List[Installed]) -> Installed:
    """Of several sglang dist-infos whose RECORD lists the package, the one whose version is
    the package's own (its ``_version.py`` or ``version.py``): the others are stale, left by
    an upgrade (``pip install --upgrade --target`` keeps an old dist-info of another name).
    Refused when the version file does not pick exactly one."""
    from .variants import detect_release, release_key  # here: only a second dist-info asks

    own, where = detect_release(root, git=False)
    same = [f for f in found if own is not None and release_key(f.version) == release_key(own)]
    if len(same) == 1:
        return same[0]
    dirs = sorted(os.path.join(root.path, os.path.dirname(f.record_path)) for f in found)
    says = ("its %s says %s, which %s" % (where, own, "more than one of them is" if same
                                          else "none of them is")
            if own is not None else "it has no version file that says which")
    raise TargetError(
        "%s holds %d dist-info directories of %s whose RECORD lists the package: %s; and %s, "
        "so nothing tells which RECORD proves its files pristine. Remove the stale one (pip "
        "install --upgrade --target leaves the old release's behind), then run patchkit again"
        % (root.path, len(found), DIST, " and ".join(dirs), says), path=root.path,
        dist_infos=dirs)


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return "%d:%d" % (st.st_ino, st.st_mtime_ns)


def _editable(dist_info: str) -> bool:
    try:
        with open(os.path.join(dist_info, "direct_url.json"), "rb") as fh:
            data = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and bool((data.get("dir_info") or {}).get("editable"))


_CACHE: Dict[str, Tuple[Tuple[int, int, int], Dict[str, str]]] = {}
#: the largest RECORD read (SGLang's is about 200 KB)
RECORD_LIMIT = 64 << 20


def _read_record(path: str) -> Dict[str, str]:
    """RECORD as root-relative path -> hex sha256; parsed once while the file stays the same
    (an apply asks several times; a reinstall rewrites it)."""
    try:
        st = os.stat(path)
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if path in _CACHE and _CACHE[path][0] == key:
            return _CACHE[path][1]
        text = read_regular(path, RECORD_LIMIT).decode("utf-8")
    except NotRegular as exc:
        raise TargetError("%s %s; pip writes RECORD as a file listing the package's files. "
                          "Reinstall the package with pip's --force-reinstall, or remove the "
                          "damaged dist-info" % (exc.path, exc.what), path=exc.path) from None
    except (OSError, UnicodeDecodeError):
        return {}
    _CACHE[path] = (key, _parse(text))
    return _CACHE[path][1]


def _parse(text: str) -> Dict[str, str]:
    import csv

    out: Dict[str, str] = {}
    for row in csv.reader(io.StringIO(text)):
        if row and row[0]:
            out[os.path.normpath(row[0]).replace(os.sep, "/")] = _hex(row[1] if len(row) > 1 else "")
    return out


def installs(roots: Roots) -> Dict[str, Installed]:
    """The installed distribution of each root that is one."""
    out = {}
    for root in roots:
        found = installed(root)
        if found is not None:
            out[root.name] = found
    return out


def matches(found: Installed, root: Root, path: str, data: Optional[bytes]) -> Optional[bool]:
    """Do ``data`` (a checkout-layout ``path`` of the root) match RECORD? None: no proof."""
    want = found.hexdigest(root.mapped(path))
    if not want or data is None:
        return None
    return hashlib.sha256(data).hexdigest() == want


def record_checks(entries: List[Any], roots: Roots, found: Dict[str, Installed],
                  recorded: Dict[Tuple[str, str], Set[str]],
                  applied: Optional[Dict[str, List[str]]] = None) -> List[Dict[str, Any]]:
    """Each touched file of an installed root holds the bytes its wheel's RECORD lists, or
    the bytes patchkit itself wrote there last (then its state is the truth, not RECORD).
    ``applied``: each root's recorded fixes, which the reinstall a refusal advises loses."""
    from .checks import result  # here: a status checks no RECORD

    out = []
    for e in entries:
        dist = found.get(e.root)
        if dist is None or e.original is None:  # created by the fix: presence checks cover it
            continue
        root = roots.get(e.root)
        rel = root.mapped(e.path)
        label = "%s is as installed" % e.where
        have = hashlib.sha256(e.original).hexdigest()
        want = dist.hexdigest(rel)
        if have in recorded.get((e.root, e.path), set()):
            ok, detail = True, "differs from the RECORD of %s only by a fix patchkit applied" % dist.label
        elif want is None:
            ok, detail = True, ("not checked: %s is not listed in %s (the wheel did not install "
                                "it), so nothing proves it pristine" % (rel, dist.record_path))
        elif not want:
            ok, detail = True, ("not checked: %s lists %s without a hash, so nothing proves it "
                                "pristine" % (dist.record_path, rel))
        elif have == want:
            ok, detail = True, "matches the RECORD of %s" % dist.label
        else:
            ok, detail = False, (
                "%s was modified outside patchkit: its sha256 is %s, the RECORD of %s (%s) lists "
                "%s. Put the installed file back (%s install --force-reinstall --no-deps "
                "%s==%s%s) or make the edit a fix, then apply again"
                % (e.where, have, dist.label, os.path.join(root.path, dist.record_path), want,
                   _pip_of(root.path, roots.interpreters.get(e.root)), DIST, dist.version,
                   _reinstall_loses((applied or {}).get(e.root) or [])))
        out.append(result("record-clean", label, ok, detail, e.where))
    return out


def _pip_of(site: str, python: Optional[str]) -> str:
    """The pip that installs into ``site`` (a site-packages root): its interpreter's (``python:``
    targets), else that of the venv holding it, else the bare ``pip``, which installs into
    whatever environment is first on PATH (patchkit's own, often)."""
    if python:
        return "%s -m pip" % python
    here = os.path.abspath(site)
    while os.path.dirname(here) != here:
        if os.path.isfile(os.path.join(here, "pyvenv.cfg")):
            return "%s -m pip" % os.path.join(here, "bin", "python")
        here = os.path.dirname(here)
    return "pip"


def _reinstall_loses(names: List[str]) -> str:
    """What a forced reinstall does to the fixes applied on the root: it rewrites every file
    of the wheel, so each becomes ``lost`` until applied again."""
    if not names:
        return ""
    return ("; it rewrites every file of the wheel, so the fixes applied there (%s) become "
            "lost: patchkit sync, or patchkit apply %s, puts them back after it"
            % (", ".join(names), " ".join(names)))

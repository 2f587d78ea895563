"""Target roots: layout detection and safe mapping of patch paths to files.

Patch paths are written against an SGLang checkout (``python/sglang/...``); an installed
package carries them as ``sglang/...``; a ``plain`` directory takes them as they are. Unsafe
paths (absolute, ``..``, out through a symlink, into ``.patchkit/`` or ``.git/``) are refused.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Dict, Iterator, Optional, Set

from ..errors import TargetError, UnsafePathError, UsageError
from .fsops import read_bytes
from .recordbase import Record, record_dataclass

CHECKOUT, PACKAGE, PLAIN = "checkout", "package", "plain"

#: directories of a root no patch may write into, and whose they are
RESERVED = {".patchkit": "patchkit's own state", ".git": "git"}


def detect_layout(path: str) -> str:
    if os.path.isdir(os.path.join(path, "python", "sglang")):
        return CHECKOUT
    if os.path.isfile(os.path.join(path, "sglang", "__init__.py")) and not os.path.exists(
            os.path.join(path, "python")):
        return PACKAGE
    return PLAIN


def check_rel(root_name: str, rel: str) -> list:
    """The components of a patch path, refused (UnsafePathError) when it is empty, holds a NUL,
    is absolute, has ``..`` or names a RESERVED directory: the checks that need no tree, shared
    by ``apply`` and ``patchkit import`` (one validator for both)."""
    where = "%s:%s" % (root_name, rel)
    if not rel or "\0" in rel:
        raise UnsafePathError("%s: the path is empty or contains a NUL byte" % where,
                              root=root_name, path=rel)
    if os.path.isabs(rel) or rel.startswith("\\"):
        raise UnsafePathError("%s: the path is absolute; paths must be relative to their "
                              "root" % where, root=root_name, path=rel)
    parts = rel.replace("\\", "/").split("/")
    if ".." in parts:
        raise UnsafePathError("%s: the path contains '..'; paths must stay inside their "
                              "root" % where, root=root_name, path=rel)
    for name in RESERVED:
        if name in parts:
            raise UnsafePathError("%s is inside %s/, which belongs to %s; a patch may not write "
                                  "there" % (where, name, RESERVED[name]), root=root_name, path=rel)
    return parts


@record_dataclass(frozen=True)
class Root(Record):
    """One named root of the target: where it lies, its real path and its layout."""

    name: str
    path: str  # absolute, as given
    real: str  # os.path.realpath(path)
    layout: str

    def package_dir(self) -> Optional[str]:
        candidates = (os.path.join(self.path, "python", "sglang"), os.path.join(self.path, "sglang"))
        return next((c for c in candidates if os.path.isdir(c)), None)

    def mapped(self, rel: str) -> str:
        """The root-relative path of a checkout-layout patch path in this root's layout."""
        if self.layout == PACKAGE and rel.startswith("python/sglang/"):
            return rel[len("python/"):]
        return rel

    def unmapped(self, rel: str) -> str:
        """The checkout-layout path of a path relative to this root (``mapped`` undone)."""
        return "python/" + rel if self.layout == PACKAGE and rel.startswith("sglang/") else rel


def sglang_tree_root(path: str) -> Optional[str]:
    """The SGLang tree at ``path``: ``path`` itself (a checkout or an installed-package
    directory) or the checkout whose ``python/`` it is; None when it holds neither."""
    layout, parent = detect_layout(path), os.path.dirname(path)
    if layout == PACKAGE and os.path.basename(path) == "python" and detect_layout(parent) == CHECKOUT:
        return parent
    return path if layout in (CHECKOUT, PACKAGE) else None




#: Where the target's interpreter would import ``sglang`` from, without importing it.
_FIND_SGLANG = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "print(json.dumps({'package': list(spec.submodule_search_locations or []) if spec else [],"
    " 'path': [p for p in sys.path if p]}))\n"
)


def interpreter_sglang(python: str) -> str:
    """The root (site-packages or checkout) of the ``sglang`` package ``python`` imports, asked
    of the interpreter itself, so a venv, a ``.pth`` or an editable install answer as at serve."""
    if not os.path.exists(python):
        raise TargetError(f"interpreter {python} does not exist; pass the python of the "
                          "environment that runs SGLang (python:/path/to/bin/python)", path=python)
    import subprocess  # here: a command that runs no process (a status) does not load it

    try:
        proc = subprocess.run([python, "-c", _FIND_SGLANG], capture_output=True, text=True,
                              timeout=120, cwd="/", stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"cannot ask {python} where its sglang package is: {exc}; check that "
                          "it is a working Python interpreter", path=python) from None
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if proc.returncode != 0 or not isinstance(answer, dict):
        raise TargetError(f"cannot ask {python} where its sglang package is: `{python} -c ...` "
                          f"exited {proc.returncode}: {proc.stderr.strip()[-500:] or 'no output'}",
                          path=python)
    looked = ", ".join(answer.get("path") or []) or "an empty sys.path"
    for package in answer.get("package") or []:
        root = sglang_tree_root(os.path.dirname(package))
        if root is not None:
            return root
    raise TargetError(f"no `sglang` package found for {python}: it does not import sglang "
                      f"(looked in its sys.path: {looked}); install SGLang into that "
                      "environment, or pass --target with an SGLang checkout", path=python)


def python_root(spec: str) -> "tuple[str, str]":
    """(sglang root, interpreter) of a root given as ``python:INTERPRETER``: a command name is
    looked up on PATH, as a shell would; the interpreter itself says where its sglang is."""
    given = spec[len("python:"):]
    if given and os.sep not in given:
        import shutil  # here: only a root given as python:NAME needs it

        given = shutil.which(given) or given
    interpreter = os.path.abspath(os.path.expanduser(given))
    return interpreter_sglang(interpreter), interpreter


class Roots:
    def __init__(self, mapping: Dict[str, str]) -> None:
        if not isinstance(mapping, dict) or not mapping:
            raise UsageError("the request names no roots; give at least one (e.g. sglang=/path)")
        self._roots: Dict[str, Root] = {}
        self.interpreters: Dict[str, str] = {}  # roots given as python:INTERPRETER
        self._name_max: Dict[str, int] = {}  # of each root's file system, asked once per run
        self._plain: Set[str] = set()  # directories found not to be symlinks (_real_below)
        for name, path in mapping.items():
            path = str(path)
            if path.startswith("python:"):  # resolved here, on the host that runs the engine
                path, self.interpreters[str(name)] = python_root(path)
            if not os.path.isabs(path):
                raise UsageError("root %s: %r is not an absolute path" % (name, path), root=name)
            if not os.path.isdir(path):
                raise TargetError("root %s: %s does not exist or is not a directory; check the "
                                  "target's root paths" % (name, path), root=name, path=path)
            self._roots[str(name)] = Root(str(name), path, os.path.realpath(path), detect_layout(path))

    def __iter__(self) -> Iterator[Root]:
        return iter(self._roots.values())

    def __contains__(self, name: object) -> bool:
        """Whether root ``name`` was given."""
        return name in self._roots

    def where(self, name: str, rel: str) -> str:
        """``root:path`` of a checkout-layout patch path as the file lies in that root (an
        installed package's ``sglang/x.py``, not ``python/sglang/x.py``): how messages name it."""
        root = self._roots.get(name)
        return "%s:%s" % (name, root.mapped(rel) if root is not None else rel)

    def file(self, name: str, rel: str, **fields: Any) -> Dict[str, Any]:
        """A file of a result: ``root``, ``path`` (the patch's) and, where the file lies
        elsewhere in its root (an installed package), ``where`` (:meth:`where`)."""
        out: Dict[str, Any] = {"root": name, "path": rel}
        shown = self.where(name, rel)
        if shown != "%s:%s" % (name, rel):
            out["where"] = shown
        out.update(fields)
        return out

    def get(self, name: str) -> Root:
        try:
            return self._roots[name]
        except KeyError:
            raise UsageError("root %r is not one of the target's roots (%s); add it to the "
                             "target (--root %s=PATH)" % (name, ", ".join(sorted(self._roots)), name),
                             root=name) from None

    def resolve(self, root_name: str, rel: str) -> str:
        """The real absolute path of ``rel`` in root ``root_name``, refused if unsafe."""
        root = self.get(root_name)
        where = "%s:%s" % (root_name, rel)
        parts = check_rel(root_name, rel)
        limit = self._name_max.get(root_name)
        if limit is None:
            limit = self._name_max[root_name] = _name_max(root)
        for part in parts:
            size = len(part.encode("utf-8", "surrogateescape"))
            if size > limit:
                raise UnsafePathError("%s: the name %s... is %d bytes long; the file system of root "
                                      "%s takes names of at most %d bytes (255 on most): shorten it "
                                      "in the patch" % (where, part[:40], size, root_name, limit),
                                      root=root_name, path=rel)
        full = _real_below(root.real, root.mapped(rel), self._plain)
        prefix = _prefix(root)
        if full != root.real and not full.startswith(prefix):
            raise UnsafePathError("%s resolves to %s, outside root %s (%s) through a symlink; "
                                  "patchkit reads and writes files only inside its roots"
                                  % (where, full, root_name, root.real),
                                  root=root_name, path=rel, resolved=full)
        inside = full[len(prefix):].split("/")
        for name in RESERVED:
            if name in parts or name in inside:
                raise UnsafePathError(
                    "%s%s is inside %s/, which belongs to %s; a patch may not write there"
                    % (where, "" if name in parts else " (resolved: %s)" % full[len(prefix):],
                       name, RESERVED[name]), root=root_name, path=rel)
        return full

    def canonical(self, root_name: str, rel: str) -> str:
        """The one spelling of ``rel`` in its root (checkout layout, no ``.``, empty component
        or symlink inside the root), so one file is one entry however a patch spells it."""
        root = self.get(root_name)
        full = self.resolve(root_name, rel)
        if full == root.real:
            raise UnsafePathError("%s:%s names the root directory itself, not a file"
                                  % (root_name, rel), root=root_name, path=rel)
        return root.unmapped(self.relative(root_name, full))

    def relative(self, root_name: str, full: str) -> str:
        """``full`` (a real path inside root ``root_name``) relative to that root, as on disk."""
        root = self.get(root_name)
        if full == root.real:
            return ""
        prefix = _prefix(root)
        if not full.startswith(prefix):
            raise UnsafePathError("%s is outside root %s (%s)" % (full, root_name, root.real),
                                  root=root_name, path=full)
        return full[len(prefix):]

    def read(self, root_name: str, rel: str) -> Optional[bytes]:
        """The bytes of file ``rel`` of a root, read from the disk now (None: no file)."""
        return read_bytes(self.resolve(root_name, rel))

    def placeholders(self, python: str) -> Dict[str, str]:
        return {"{python}": python, **{"{root:%s}" % root.name: root.path for root in self}}


def _real_below(real_root: str, rel: str, plain: Set[str]) -> str:
    """``os.path.realpath(real_root/rel)`` without resolving ``real_root`` again (it is the
    root's real path, found once per run): only ``rel``'s components are looked at, one
    ``lstat`` each, and a symlink among them is left to ``realpath``. ``rel`` has no ``..``.
    ``plain`` holds the directories this run found to be directories, not symlinks: each is
    looked at once per run, not once per file below it (the drift series' 2,152 paths: 13,600
    ``lstat`` calls, 2,600 so). A file, the last component, is looked at every time."""
    path = real_root
    parts = [p for p in rel.split(os.sep) if p not in ("", ".")]
    last = len(parts) - 1
    for i, part in enumerate(parts):
        step = path + os.sep + part if path != os.sep else os.sep + part
        if i < last and step in plain:
            path = step
            continue
        try:
            mode = os.lstat(step).st_mode
        except OSError:  # missing (or below a file): the rest is taken as written, as realpath does
            return os.path.join(step, *parts[i + 1:])
        if stat.S_ISLNK(mode):
            return os.path.realpath(os.path.join(step, *parts[i + 1:]))
        if i < last and stat.S_ISDIR(mode):
            plain.add(step)
        path = step
    return path


def _prefix(root: Root) -> str:
    return root.real.rstrip(os.sep) + os.sep


def _name_max(root: Root) -> int:
    try:
        limit = int(os.pathconf(root.real, "PC_NAME_MAX"))
    except (OSError, ValueError):
        limit = 255
    return limit if limit > 0 else 255


def dot_git_top(root: str) -> Optional[str]:
    """The real path of the nearest directory upwards holding a ``.git`` (file or directory),
    or None: whether a root is in a checkout at all, asked without running git (the client's
    ``gitrepo.work_tree_top`` asks git, which also knows ``GIT_DIR`` and bare repositories)."""
    cur = os.path.realpath(root)
    while True:
        if os.path.lexists(os.path.join(cur, ".git")):
            return cur
        parent = os.path.dirname(cur)
        if parent == cur:
            return None
        cur = parent

"""What is running from a target's roots, read from ``/proc`` (docs/state.md, "Running
processes"), and the bytecode Python would serve for the files patchkit changed.

A process *uses* a root when what the kernel shows of it points into the root: its executable,
a path on its command line (a script, a serve script), its ``/proc/PID/maps`` (a loaded
extension), or, for a Python process only, its working directory, ``PYTHONPATH``,
``VIRTUAL_ENV``, the venv its interpreter runs from, or its interpreter's prefix; or it is a
Python of the target's own venv when that venv serves the sglang root (``served_venv``: an
editable install's ``.pth`` naming the checkout). A process
also uses what its parent uses when the parent runs a script from the root, or when both run
the same Python (``multiprocessing`` spawn workers, an SGLang scheduler). A process that
started before the last change patchkit recorded to a file of a root it uses, or before the
files telling the release under that root last changed (:func:`release_marks`: a checkout of
another commit, a reinstall), is ``restart pending``. What ``/proc`` does not show is never
guessed: a process whose entries cannot be read is counted as unreadable, and a host without
``/proc`` says so.

Times: each history event records the kernel's boot id and ``CLOCK_BOOTTIME`` (the clock of a
process's start time in ``/proc/PID/stat``), so the comparison does not depend on wall-clock
seconds; an event of an earlier engine (wall clock only) counts as after any process started
within its second (restart pending, never a false "current")."""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import time
from contextlib import suppress
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .contract import PRIMARY_ROOT
from .paths import PACKAGE, Roots, dot_git_top
from .pycache import interpreter_prefix, stale_pycs
from .records import State

PROC = "/proc"
CURRENT, PENDING = "current", "restart-pending"
_PYTHON = re.compile(r"^python[0-9.]*[a-z]*$|^pypy")
_SHOWN = 5  # changed files named per process; the count is exact


def clock() -> Dict[str, Any]:
    """The time of an event as ``/proc`` measures a process's start: boot id and seconds since
    boot (``CLOCK_BOOTTIME``; -1 where the platform has none)."""
    try:
        uptime = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        uptime = -1.0
    return {"boot_id": _boot_id(), "uptime": round(uptime, 3)}


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


# -- reading /proc ---------------------------------------------------------------------------

class Proc:
    """What ``/proc/PID`` shows of one process (``readable``: its cwd, environment, maps too)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ppid = 0
        self.start = 0.0  # seconds since boot
        self.argv: List[str] = []
        self.exe: Optional[str] = None
        self.cwd: Optional[str] = None
        self.env: Dict[str, str] = {}
        self.maps_text = ""  # /proc/PID/maps as read; ``maps`` the paths it maps
        self._maps: Optional[Set[str]] = None
        self.readable = True

    @property
    def maps(self) -> Set[str]:
        """The files the process maps (read from ``maps_text`` when first asked)."""
        if self._maps is None:
            self._maps = set()
            for row in self.maps_text.splitlines():
                cols = row.split(None, 5)
                if len(cols) == 6 and cols[5].startswith("/"):
                    self._maps.add(cols[5].replace(" (deleted)", ""))
        return self._maps

    @property
    def python(self) -> bool:
        names = [os.path.basename(p) for p in (self.exe or "", self.argv[0] if self.argv else "")]
        return any(_PYTHON.match(n) for n in names if n)

    def command(self) -> str:
        return shlex.join(self.argv)

    def arg_path(self, value: str) -> str:
        return os.path.normpath(os.path.join(self.cwd or "/", value))

    def resolved(self, path: str) -> str:
        """``path`` (absolute) as it resolves for this process: its own descriptors
        (``/dev/fd/N``, ``/dev/stdin``, ``/proc/self/...``) are looked up as its, under
        ``/proc/PID``; resolved here as written they would be patchkit's own."""
        for own in ("/dev/fd/", "/proc/self/", "/proc/thread-self/"):
            if path.startswith(own):
                path = "%s/%d/%s%s" % (PROC, self.pid, "fd/" if own == "/dev/fd/" else "",
                                       path[len(own):])
                break
        else:
            std = ("/dev/stdin", "/dev/stdout", "/dev/stderr")
            if path in std:
                path = "%s/%d/fd/%d" % (PROC, self.pid, std.index(path))
        return os.path.realpath(path)


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as fh:  # one read, unbuffered: no tty check, no seek
        return fh.read()


def _stat_fields(pid: int, base: str) -> Tuple[int, float]:
    text = _read("%s/%d/stat" % (base, pid)).decode("utf-8", "replace")
    rest = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and ")"
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return int(rest[1]), int(rest[19]) / float(ticks)


def read_proc(pid: int, base: str = PROC, maps: bool = True) -> Optional[Proc]:
    """The process ``pid``, None when it is gone or a kernel thread (nothing to restart). Its
    environment is read for a Python process only (nothing else looks at it); with ``maps``
    False its maps are too (the ``.pyc`` purge, which asks only about Python processes)."""
    p = Proc(pid)
    try:
        raw = _read("%s/%d/cmdline" % (base, pid))
        if not raw:
            return None  # a kernel thread or a zombie (most of /proc): its stat is not read
        p.ppid, p.start = _stat_fields(pid, base)
    except (OSError, ValueError, IndexError):
        return None
    p.argv = [a.decode("utf-8", "surrogateescape") for a in raw.rstrip(b"\0").split(b"\0")]
    try:
        p.exe = os.readlink("%s/%d/exe" % (base, pid))
        p.cwd = os.readlink("%s/%d/cwd" % (base, pid))
        python = p.python
        env = _read("%s/%d/environ" % (base, pid)) if python else b""
        mapped = _read("%s/%d/maps" % (base, pid)) if python or maps else b""
    except FileNotFoundError:
        return None
    except OSError:
        p.readable = False
        return p
    for item in env.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            p.env[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
    p.maps_text = mapped.decode("utf-8", "surrogateescape")
    return p


class Scan:
    """Every process ``/proc`` shows, or why it shows none (``unavailable``)."""

    def __init__(self, base: str = PROC, maps: bool = True) -> None:
        self.procs: Dict[int, Proc] = {}
        self.unavailable: Optional[str] = None
        self.btime: Optional[float] = None
        try:
            pids = [int(n) for n in os.listdir(base) if n.isdigit()]
        except OSError as exc:
            self.unavailable = "cannot read %s (%s): running processes were not looked at" % (
                base, exc.strerror)
            return
        if not pids:
            self.unavailable = "%s lists no processes: running processes were not looked at" % base
            return
        with suppress(OSError, ValueError):
            for row in _read("%s/stat" % base).decode().splitlines():
                if row.startswith("btime "):
                    self.btime = float(row.split()[1])
        mine = ancestors(os.getpid(), base)
        for pid in pids:
            if pid in mine:
                continue  # patchkit itself, and the shell or agent that runs it
            p = read_proc(pid, base, maps)
            if p is not None:
                self.procs[pid] = p

    @property
    def unreadable(self) -> List[Proc]:
        return [p for p in self.procs.values() if not p.readable]

    def started_at(self, p: Proc) -> Optional[str]:
        return None if self.btime is None else _iso(self.btime + p.start)


def ancestors(pid: int, base: str = PROC) -> Set[int]:
    """``pid`` and its parent, its parent's parent and so on, as ``/proc`` shows them."""
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = _stat_fields(pid, base)[0]
        except (OSError, ValueError, IndexError):
            break
    return out


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(
        microsecond=0).isoformat().replace("+00:00", "Z")


# -- which processes use which root ------------------------------------------------------------

def _inside(path: Optional[str], top: str) -> bool:
    return bool(path) and (path == top or path.startswith(top.rstrip("/") + "/"))  # type: ignore[union-attr]


#: A root's own bookkeeping, never code it serves: git's objects (a `git gc` packing them is
#: no server) and patchkit's state.
_BOOKKEEPING = (".git", ".patchkit")


def _in_code(path: Optional[str], top: str) -> bool:
    """``path`` is under ``top`` and not in the root's bookkeeping (``_BOOKKEEPING``)."""
    if not _inside(path, top):
        return False
    rest = str(path)[len(top.rstrip("/")):].lstrip("/")
    return rest.split("/", 1)[0] not in _BOOKKEEPING


def _spellings(roots: Roots) -> Dict[str, Tuple[str, ...]]:
    return {r.name: tuple(dict.fromkeys((os.path.normpath(r.path), r.real))) for r in roots}


def _venv(p: Proc) -> Optional[str]:
    """The venv the Python process runs from (``argv[0]`` in ``VENV/bin``), else None."""
    for candidate in (p.argv[0] if p.argv else "", p.exe or ""):
        if "/" not in candidate:
            continue
        bindir = os.path.dirname(p.arg_path(candidate))
        top = os.path.dirname(bindir)
        if os.path.basename(bindir) == "bin" and os.path.isfile(os.path.join(top, "pyvenv.cfg")):
            return top
    return None


def _why(p: Proc, tops: Sequence[str]) -> Optional[str]:
    """How process ``p`` uses the root spelled ``tops``, or None."""
    def hit(path: Optional[str], spelled: bool = False) -> bool:
        """``path`` is under the root; one the process spelled itself (a command-line path, a
        ``PYTHONPATH`` entry: the kernel resolved the rest) is compared as it resolves too,
        since a deploy's ``current -> releases/X`` names the root's real path another way."""
        if any(_in_code(path, t) for t in tops):
            return True
        if not spelled or not path or any(_inside(path, t) for t in tops):
            return False
        real = p.resolved(path)
        return any(_in_code(real, t) for t in tops)

    if hit(p.exe):
        return "runs %s" % p.exe
    program = _program_text(p)
    for i, arg in enumerate(p.argv[1:]):
        if i == program or arg.startswith("-") or "/" not in arg and not arg.endswith((".py", ".sh")):
            continue
        if hit(p.arg_path(arg), spelled=True):
            return "command line names %s" % p.arg_path(arg)
    # a file under a root has the root in its path: the maps of a process naming none are not parsed
    named = any(t in p.maps_text for t in tops)
    loaded = sorted(m for m in p.maps if hit(m)) if named else []
    if loaded:
        return "has %s loaded" % loaded[0]
    if not p.python:
        return None
    if hit(p.cwd):
        return "Python in working directory %s" % p.cwd
    for entry in (p.env.get("PYTHONPATH") or "").split(":"):
        if entry and hit(p.arg_path(entry), spelled=True):
            return "PYTHONPATH has %s" % entry
    venv = p.env.get("VIRTUAL_ENV") or _venv(p)
    if venv and any(_inside(t, os.path.normpath(venv)) or _inside(os.path.realpath(t), os.path.realpath(venv))
                    for t in tops):
        return "Python of the venv %s" % venv
    if not venv and p.exe:
        prefix = os.path.dirname(os.path.dirname(p.exe))
        if prefix != "/" and any(_inside(t, prefix) for t in tops):
            return "Python %s, whose prefix holds the root" % p.exe
    return None


def served_venv(python: Optional[str], root: Optional[str]) -> Optional[str]:
    """The venv of the target's interpreter (``VENV/bin/python``, a ``pyvenv.cfg`` beside its
    ``bin``) when that venv serves ``root``, the sglang root: its ``site-packages`` is in the
    root or holds it, or names it in a ``.pth`` or an editable install's finder (what ``pip
    install -e`` leaves). Else None: an interpreter outside a venv is shared, and a venv that
    names no such thing is not taken to run the root's code."""
    if not python or not root or "/" not in python:
        return None
    top = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    if not os.path.isfile(os.path.join(top, "pyvenv.cfg")):
        return None
    spelled = {os.path.normpath(root), os.path.realpath(root)}
    lib = os.path.join(top, "lib")
    for version in (os.listdir(lib) if os.path.isdir(lib) else ()):
        site = os.path.join(lib, version, "site-packages")
        if any(_inside(site, r) or _inside(r, site) for r in spelled):
            return top
        for name in (os.listdir(site) if os.path.isdir(site) else ()):
            if name.endswith(".pth") or name.startswith("__editable__") and name.endswith(".py"):
                with suppress(OSError), open(os.path.join(site, name), errors="replace") as fh:
                    text = fh.read(1 << 16)
                    if any(_names(text, r) for r in spelled):
                        return top
    return None


def _names(text: str, path: str) -> bool:
    """Whether ``text`` names ``path`` or a path under it (not ``/opt/sglang-old`` for
    ``/opt/sglang``)."""
    at = text.find(path)
    while at >= 0:
        end = at + len(path)
        if end == len(text) or text[end] in "/\n\r'\"":
            return True
        at = text.find(path, at + 1)
    return False


def users(roots: Roots, scan: Scan, served: Optional[str] = None) -> Dict[int, Dict[str, str]]:
    """pid -> {root: how it uses it}, for every readable process using a root. ``served``: the
    venv of the target's interpreter, whose sglang is the sglang root wherever that lies (an
    editable install's checkout): each Python of that venv uses the root."""
    found: Dict[int, Dict[str, str]] = {}
    spelled = _spellings(roots)
    for p in scan.procs.values():
        if not p.readable:
            continue
        for name, tops in spelled.items():
            why = _why(p, tops)
            if not why and served and name == PRIMARY_ROOT and p.python:
                venv = p.env.get("VIRTUAL_ENV") or _venv(p)
                if venv and os.path.realpath(venv) == os.path.realpath(served):
                    why = "Python of the venv %s, whose sglang is this root" % served
            if why:
                found.setdefault(p.pid, {})[name] = why
    # children: of a process running a script from the root, or spawned by the same Python
    changed = True
    while changed:
        changed = False
        for p in scan.procs.values():
            parent = scan.procs.get(p.ppid)
            if not p.readable or parent is None or parent.pid not in found:
                continue
            same_python = p.python and parent.python and p.exe == parent.exe
            for name, why in found[parent.pid].items():
                if name in found.get(p.pid, {}):
                    continue
                if same_python or why.startswith(("command line", "runs")):
                    found.setdefault(p.pid, {})[name] = "child of PID %d (%s)" % (parent.pid, why)
                    changed = True
    return found


# -- what patchkit changed, and when ------------------------------------------------------------

class Change:
    def __init__(self, root: str, path: str, event: Dict[str, Any]) -> None:
        self.root, self.path = root, path
        self.at = str(event.get("at") or "")
        self.boot_id = event.get("boot_id")
        self.uptime = event.get("uptime")
        self.since: Optional[float] = None  # changed underneath since: seconds since boot

    def after(self, p: Proc, scan: Scan, boot_id: Optional[str]) -> bool:
        """Whether this change came after process ``p`` started (it may run the old bytes); a
        file changed underneath since patchkit wrote it counts from when it changed."""
        if self.since is not None and p.start < self.since:
            return True
        if self.boot_id and boot_id and isinstance(self.uptime, (int, float)) and self.uptime >= 0:
            return self.boot_id == boot_id and p.start < self.uptime
        when = _parse_iso(self.at)
        if when is None or scan.btime is None:
            return True  # no time to compare: never claim the process is current
        return scan.btime + p.start < when + 1.0  # the event's second is cut: count it whole


def _parse_iso(text: str) -> Optional[float]:
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


def _booted(scan: Scan) -> Optional[float]:
    """The wall clock's time at boot, to the clock's precision (``/proc/stat``'s ``btime`` is
    whole seconds: a ctime a second after a process started could date before it)."""
    try:
        return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return scan.btime


def last_changes(state_dir: str, state: State) -> Dict[Tuple[str, str], Change]:
    """(root, path) -> the last change patchkit recorded for it: history events naming their
    files (this engine), else the ``applied_at`` of the fixes in ``state.json``."""
    out: Dict[Tuple[str, str], Change] = {}
    for fix in state.fixes:
        for f in fix.files:
            out[f.key] = Change(f.root, f.path, {"at": fix.applied_at})
    try:
        text = _read(os.path.join(state_dir, "history.jsonl")).decode("utf-8", "replace")
    except OSError:
        return out
    for row in text.splitlines():
        try:
            event = json.loads(row)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("outcome") not in ("committed", "completed"):
            continue
        for pair in event.get("files") or ():
            if isinstance(pair, list) and len(pair) == 2:
                out[(str(pair[0]), str(pair[1]))] = Change(str(pair[0]), str(pair[1]), event)
    return out


def release_marks(roots: Roots) -> List[Tuple[str, str, str]]:
    """(root, what, absolute path) of the few files whose ctime dates the last time the files
    under a root were replaced wholesale, whatever patchkit recorded: the package's version file
    (rewritten by a checkout of another release, an unpacked tree, a reinstall), an installed
    package's ``sglang-*.dist-info/RECORD`` (pip writes it anew on every install) and, for a
    root in a git work tree (not an installed package's), ``HEAD``, its reflog and the branch
    it names (git writes them when HEAD moves: a checkout, a reset, a pull). A handful of
    ``stat`` calls, never a walk of the root's files."""
    out: List[Tuple[str, str, str]] = []
    for root in roots:
        pkg = root.package_dir()
        for name in ("_version.py", "version.py") if pkg else ():
            out.append((root.name, "the release's version file changed", os.path.join(pkg or "", name)))
        if root.layout == PACKAGE:
            with suppress(OSError):
                for name in sorted(os.listdir(root.path)):
                    stem, ext = os.path.splitext(name)
                    if ext == ".dist-info" and stem.partition("-")[0].lower() == "sglang":
                        out.append((root.name, "the package was installed again",
                                    os.path.join(root.path, name, "RECORD")))
            continue
        for what, path in _git_marks(root.path):
            out.append((root.name, what, path))
    return out


def _git_marks(path: str) -> List[Tuple[str, str]]:
    """The files git rewrites when HEAD moves, in the work tree holding ``path`` (none outside
    one): read from ``.git`` (a directory, or a worktree's or submodule's ``gitdir:`` file)."""
    top = dot_git_top(path)
    if top is None:
        return []
    moved = "git's HEAD moved: a checkout, a reset, a pull"
    git_dir = os.path.join(top, ".git")
    if not os.path.isdir(git_dir):
        try:
            text = _read(git_dir).decode("utf-8", "replace")
        except OSError:  # where HEAD is cannot be told: .git/HEAD, which a stat cannot date
            return [(moved, os.path.join(git_dir, "HEAD"))]
        if not text.startswith("gitdir:"):
            return []
        git_dir = os.path.join(top, text[len("gitdir:"):].strip())
    out = [(moved, os.path.join(git_dir, "HEAD")), (moved, os.path.join(git_dir, "logs", "HEAD"))]
    with suppress(OSError, ValueError):
        head = _read(os.path.join(git_dir, "HEAD")).decode("utf-8").strip()
        if head.startswith("ref: refs/"):
            common = git_dir
            with suppress(OSError):  # a worktree's branches are the main repository's
                common = os.path.join(git_dir, _read(os.path.join(git_dir, "commondir")).decode().strip())
            out.append((moved, os.path.join(common, head[len("ref: "):])))
    return out


class Mark:
    """When the files under a root were last replaced wholesale, as a file of
    :func:`release_marks` dates it (``since``: seconds since boot; None: it could not be dated,
    so every process using the root counts as started before it)."""

    def __init__(self, root: str, what: str, path: str, since: Optional[float]) -> None:
        self.root, self.what, self.path, self.since = root, what, path, since

    def label(self, roots: Roots) -> str:
        top = roots.get(self.root).path
        rel = os.path.relpath(self.path, top)
        return "%s:%s (%s%s)" % (self.root, self.path if rel.startswith("..") else rel, self.what,
                                 "" if self.since is not None else ": cannot be dated")


def _marks(roots: Roots, booted: Optional[float]) -> List[Mark]:
    """The last of each root's :func:`release_marks` of each kind there is, dated by its ctime
    on the boot clock (one that cannot be dated is the last)."""
    out: Dict[Tuple[str, str], Mark] = {}
    for root, what, path in release_marks(roots):
        try:
            ctime: Optional[float] = os.stat(path).st_ctime
        except FileNotFoundError:
            continue  # not there: nothing of that kind to date (another layout, no reflog)
        except OSError:
            ctime = None
        mark = Mark(root, what, path, None if ctime is None or booted is None else ctime - booted)
        had = out.get((root, what))
        if had is None or had.since is not None and (mark.since is None or mark.since > had.since):
            out[(root, what)] = mark
    return list(out.values())


def running(roots: Roots, state_dir: str, state: State, python: Optional[str],
            base: str = PROC, served: Optional[str] = None,
            underneath: Optional[Dict[Tuple[str, str], str]] = None) -> Dict[str, Any]:
    """``status``'s ``running``: the processes using the roots, which of them run code older
    than patchkit's last change or than the files under a root it uses (:func:`release_marks`),
    and the ``.pyc`` files Python would still serve stale. ``served``: the target's
    interpreter, when the target names one (:func:`users`).
    ``underneath``: (root, path) -> the absolute path of each recorded file that no longer
    holds what patchkit wrote (drifted, reinstalled): a process started before it changed
    runs what the disk no longer holds."""
    scan = Scan(base)
    changes = last_changes(state_dir, state)
    booted = _booted(scan)  # the wall clock at boot, to date a ctime as /proc dates a start
    for key, path in (underneath or {}).items():
        try:
            if booted is None:
                break
            since = os.stat(path).st_ctime - booted
        except OSError:  # gone: when it went is not known; patchkit's own change still counts
            continue
        changes.setdefault(key, Change(key[0], key[1], {})).since = since
    marks = _marks(roots, booted)
    out: Dict[str, Any] = {"available": scan.unavailable is None, "detail": scan.unavailable,
                           "unreadable": [], "processes": [], "stale_pyc": []}
    primary = next((r.path for r in roots if r.name == PRIMARY_ROOT), None)
    found = {} if scan.unavailable else users(roots, scan, served_venv(served, primary))
    boot_id = _boot_id()
    for pid in sorted(found):
        p = scan.procs[pid]
        # the release under a root changed since the process started: every file of it may
        # have, the few patchkit recorded or not (a record forgotten since says nothing)
        newer = [m.label(roots) for m in marks
                 if m.root in found[pid] and (m.since is None or p.start < m.since)]
        newer += sorted(roots.where(c.root, c.path) for c in changes.values()
                        if c.root in found[pid] and c.after(p, scan, boot_id))
        out["processes"].append({
            "pid": pid, "ppid": p.ppid, "command": p.command(), "started_at": scan.started_at(p),
            "roots": sorted(found[pid]), "via": "; ".join("%s: %s" % kv for kv in sorted(found[pid].items())),
            "state": PENDING if newer else CURRENT, "changed": newer[:_SHOWN], "changed_count": len(newer)})
    out["unreadable"] = [{"pid": p.pid, "command": p.command()} for p in scan.unreadable]
    prefixes = pycache_prefixes([scan.procs[pid] for pid in found], python)
    out["stale_pyc"] = stale_pycs(roots, sorted(changes), prefixes)
    return out


def _program_text(p: Proc) -> Optional[int]:
    """The index in ``argv[1:]`` of a Python process's program text (``python -c CODE``), which
    is code, never a path, whatever slashes it holds; None when there is none."""
    if not p.python:
        return None
    args, i = p.argv[1:], 0
    while i < len(args):
        if args[i] == "-c":
            return i + 1
        if args[i] == "-m" or not args[i].startswith("-"):
            return None  # the interpreter's options end here
        i += 2 if args[i] in ("-X", "-W") else 1  # these two take a value: `-X dev -c CODE`
    return None


# -- bytecode caches of the processes (pycache does the files) ---------------------------------

def process_prefix(p: Proc) -> Optional[str]:
    """The ``pycache_prefix`` of a Python process: ``-X pycache_prefix=`` beats the environment."""
    argv = p.argv[1:]
    for i, arg in enumerate(argv):
        if arg in ("-c", "-m") or not arg.startswith("-"):
            break  # the interpreter's options end here
        value = arg[2:] if arg.startswith("-X") and len(arg) > 2 else (
            argv[i + 1] if arg == "-X" and i + 1 < len(argv) else "")
        if value.startswith("pycache_prefix="):
            return p.arg_path(value.split("=", 1)[1])
    env = p.env.get("PYTHONPYCACHEPREFIX")
    return p.arg_path(env) if env else None


def pycache_prefixes(procs: Iterable[Proc], python: Optional[str]) -> List[str]:
    found = [interpreter_prefix(python)] + [process_prefix(p) for p in procs if p.python]
    return sorted({os.path.abspath(f) for f in found if f})


def prefixes_in_use(roots: Roots, python: Optional[str]) -> List[str]:
    """Every ``pycache_prefix`` in use for the roots: the target interpreter's and those of the
    Python processes using them."""
    # only a Python process has a prefix; another process found only by the files it maps
    # passes nothing on to its children (only the same Python's children inherit such a use),
    # so the maps of processes that are not Python are not read
    scan = Scan(maps=False)
    found = [] if scan.unavailable else [scan.procs[pid] for pid in users(roots, scan)]
    return pycache_prefixes(found, python)

"""The patchkit agent: the program a host runs for one engine request (docs/remote.md).

Both the ``ssh://`` target (patchkit/targets/transport.py) and the fleet's action plugin start
it on a host, as ``python3 -c BOOTSTRAP``: the bootstrap (patchkit/targets/protocol.py) holds
this file's source, compressed, and runs it as ``__main__``. The agent then reads its payload
on stdin (the lengths of two frames on one line, then the engine's sources and the request, each
zlib-compressed JSON), says it holds it all, waits for the client's go-ahead, builds
``patchkit.errors`` and ``patchkit.engine`` in memory from the sources and runs the request.

Runs on the host's Python 3.8 or newer with the standard library only; imported by the client
for its protocol constants only (importing it runs nothing).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import json
import linecache
import marshal
import os
import signal
import sys
import traceback
import zlib
from typing import Any, Dict

STARTED = b"\n--patchkit-agent-started-1--\n"
READY = b"\n--patchkit-agent-ready-1--\n"
GO = b"run\n"
RESULT = b"\n--patchkit-agent-result-1--\n"
#: A line on stderr the client reads as the engine's word that it waits (for a lock), not as a
#: diagnostic: it shows what follows on its progress line (docs/remote.md).
SAYS = "--patchkit-agent-says-- "
TOO_OLD = "patchkit-agent: Python 3.8 or newer is required, found"
#: The agent's exit code when it ran nothing: no payload, a payload cut short, or no go-ahead.
RAN_NOTHING = 3


def filename(module: str, package: bool) -> str:
    """The file name a shipped module runs under on the host: its code objects carry it (the
    client's compiled ones too) and its tracebacks name it and show its lines."""
    return "<patchkit-agent>/%s%s" % (module.replace(".", "/"), "/__init__.py" if package else ".py")


def install(sources: Dict[str, str], code: bytes = b"") -> None:
    """Import patchkit's modules from ``sources`` (module name -> source) as if installed: each
    runs the code object of the client's ``code`` frame when that frame was compiled by a
    Python of this one's bytecode magic number, else its source compiled here."""
    compiled: Dict[str, Any] = {}
    magic = importlib.util.MAGIC_NUMBER
    if code[:len(magic)] == magic:
        compiled = marshal.loads(zlib.decompress(code[len(magic):]))
    packages = {"patchkit", "patchkit.engine"}
    for name in sources:
        parts = name.split(".")
        packages.update(".".join(parts[:i]) for i in range(1, len(parts)))

    class Loader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname not in sources and fullname not in packages:
                return None
            package = fullname in packages
            spec = importlib.util.spec_from_loader(fullname, self, is_package=package)
            assert spec is not None
            spec.origin = filename(fullname, package)
            spec.has_location = True  # tracebacks name the file and show its lines
            return spec

        def exec_module(self, module: Any) -> None:
            source, origin = sources.get(module.__name__, ""), module.__spec__.origin
            linecache.cache[origin] = (len(source), None, source.splitlines(True), origin)
            code = compiled.get(module.__name__)
            exec(code if code is not None else compile(source, origin, "exec"), module.__dict__)

    sys.meta_path.insert(0, Loader())


def run(request: Dict[str, Any], sources: Dict[str, str]) -> Dict[str, Any]:
    """The engine's result for ``request``; a failure to run it at all becomes a result too, in
    the contract's envelope (``patchkit.engine.contract``, run from ``sources`` by itself: it
    imports nothing of patchkit, so it answers even when the engine's package cannot load)."""
    try:
        import patchkit.engine  # type: ignore[import-not-found,unused-ignore]  # from install()

        telling: Any = contextlib.nullcontext()
        if "patchkit.engine.store" in sources:  # the engine's (a test's stand-in has none)
            from patchkit.engine.store import Store  # type: ignore[import-not-found,unused-ignore]

            telling = Store.telling(say)  # a wait for the lock is told to the client as it begins
        with telling:
            result: Dict[str, Any] = patchkit.engine.run(request)
        return result
    except BaseException as exc:  # the client must always get a result it can re-raise
        error = getattr(exc, "to_dict", None)
        if callable(error) and getattr(exc, "details", None) is not None:
            error = error()
        else:
            error = {"type": "InternalError", "details": {"traceback": traceback.format_exc()},
                     "message": "the patchkit engine failed on the host: %s: %s" % (type(exc).__name__, exc)}
        contract: Dict[str, Any] = {"__name__": "patchkit_agent_contract"}
        exec(compile(sources["patchkit.engine.contract"], "<patchkit-agent>/patchkit/engine/contract.py",
                     "exec"), contract)
        envelope: Dict[str, Any] = contract["result_envelope"](request, error)
        return envelope


def say(text: str) -> None:
    """Tell the client ``text`` (one line) on stderr, where its session picks it out by SAYS."""
    sys.stderr.write(SAYS + " ".join(text.split()) + "\n")


class QuietStderr:
    """Diagnostics go to ssh while it is connected and nowhere once it is gone."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass
        return len(text)

    def flush(self) -> None:
        pass


class Channel:
    """The result channel: the session's stdout, kept apart from everything else's."""

    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "wb")
        self.null = os.open(os.devnull, os.O_RDWR)
        os.dup2(self.null, 1)  # stray output (ours or a child's) cannot corrupt the channel
        sys.stdout = open(os.devnull, "w")

    def emit(self, data: bytes) -> None:
        try:
            self.out.write(data)
            self.out.flush()
        except (OSError, ValueError):
            pass  # the client is gone; the state on the host tells the next run what happened


def read_payload(stdin: Any) -> Dict[str, Any] | None:
    """The payload: the lengths of its three frames (the engine's sources, the request, the
    sources' code) on one line, then each frame: the first two zlib-compressed JSON, the third
    as :func:`install` reads it; None if it was cut short."""
    header = stdin.readline(64).split()
    if len(header) != 3 or not all(part.isdigit() for part in header):
        return None
    frames = []
    for size in map(int, header):
        data = stdin.read(size)
        if len(data) < size:
            return None
        frames.append(data)
    return {"modules": json.loads(zlib.decompress(frames[0]).decode("utf-8")),
            "request": json.loads(zlib.decompress(frames[1]).decode("utf-8")), "code": frames[2]}


def main() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    channel = Channel()
    sys.stderr = QuietStderr(sys.stderr)  # type: ignore[assignment]
    channel.emit(STARTED)
    stdin = sys.stdin.buffer
    payload = read_payload(stdin)
    if payload is None:
        sys.exit(RAN_NOTHING)  # no payload, or it was cut short: run nothing
    channel.emit(READY)
    if stdin.readline(16) != GO:
        sys.exit(RAN_NOTHING)  # the client never said go (it is gone, or gave up): run nothing
    os.dup2(channel.null, 0)
    install(payload["modules"], payload["code"])
    result = run(payload["request"], payload["modules"])
    channel.emit(RESULT + json.dumps(result).encode("ascii") + b"\n")


if __name__ == "__main__":
    main()

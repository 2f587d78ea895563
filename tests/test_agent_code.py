"""The agent runs the code objects the client compiled when the host's Python reads them, and
compiles the shipped sources otherwise (docs/remote.md, "How it works"). Run here as a host
runs it: the remote command through a shell, the payload on its stdin."""

from __future__ import annotations

import importlib.util
import json
import marshal
import subprocess
import sys
import zlib

from patchkit.targets import protocol
from patchkit.targets.protocol import engine_modules, remote_command

ENGINE = '''
def run(request):
    return {"format": 1, "op": request["op"], "ok": True, "dry_run": False, "recovered": [],
            "fixes": [], "status": None, "error": None, "from": FROM}
'''
FILENAME = "<patchkit-agent>/patchkit/engine/__init__.py"


def run_agent(code: bytes) -> dict:
    """The agent's result for a status request, its engine's source saying "source" and the
    code frame ``code``."""
    modules = {"patchkit.errors": engine_modules()["patchkit.errors"],
               "patchkit.engine.contract": engine_modules()["patchkit.engine.contract"],
               "patchkit.engine": "FROM = 'source'\n" + ENGINE}
    sources = zlib.compress(json.dumps(modules).encode("ascii"))
    asked = zlib.compress(json.dumps({"format": 1, "op": "status"}).encode("ascii"))
    payload = f"{len(sources)} {len(asked)} {len(code)}\n".encode("ascii") + sources + asked + code
    done = subprocess.run(["sh", "-c", remote_command(sys.executable)], input=payload + protocol.GO_LINE,
                          capture_output=True, timeout=60, check=True)
    result = protocol.parse_result(done.stdout)
    assert result is not None, done.stderr
    return result


def code_frame(magic: bytes) -> bytes:
    code = compile("FROM = 'code'\n" + ENGINE, FILENAME, "exec")
    return magic + zlib.compress(marshal.dumps({"patchkit.engine": code}))


def test_the_agent_runs_the_code_a_python_of_its_magic_number_compiled() -> None:
    assert run_agent(code_frame(importlib.util.MAGIC_NUMBER))["from"] == "code"


def test_the_agent_compiles_the_sources_when_the_code_is_another_pythons() -> None:
    other = (int.from_bytes(importlib.util.MAGIC_NUMBER[:2], "little") + 1).to_bytes(2, "little") + b"\r\n"
    assert run_agent(code_frame(other))["from"] == "source"
    assert run_agent(b"")["from"] == "source"


def test_the_shipped_code_is_the_shipped_sources_compiled_under_the_agents_file_names() -> None:
    frame = protocol._code_frame()
    assert frame[:4] == importlib.util.MAGIC_NUMBER
    code = marshal.loads(zlib.decompress(frame[4:]))
    sources = engine_modules()
    assert set(code) == set(sources)
    for name, source in sources.items():
        filename = "<patchkit-agent>/%s%s" % (name.replace(".", "/"),
                                              "/__init__.py" if name == "patchkit.engine" else ".py")
        assert code[name] == compile(source, filename, "exec"), name

        def files(c):
            yield c.co_filename
            for const in c.co_consts:
                if hasattr(const, "co_filename"):
                    yield from files(const)

        assert set(files(code[name])) == {filename}, name  # tracebacks name the agent's files

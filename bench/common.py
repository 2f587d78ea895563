"""What the benchmarks share: the installed patchkit versions, timing, diffs, the doc's sections.

Benchmarks reach patchkit only through the ``patchkit`` command of a virtualenv made here,
never by importing it, so the same code measures any revision, whatever its module layout.
"""

from __future__ import annotations

import difflib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIME = "/usr/bin/time"  # GNU time: peak RSS of the measured command
GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@patchkit.invalid",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@patchkit.invalid",
           "GIT_AUTHOR_DATE": "2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-11-01T00:00:00Z",
           "GIT_EDITOR": "true", "GIT_CONFIG_NOSYSTEM": "1"}
NEUTRAL = Path(tempfile.gettempdir())  # a working directory in no catalog
PREAMBLE = ("# Performance\n\nBenchmarks live in `bench/` (see bench/README.md); figures are "
            "from one run of `python bench/all.py`.\n\n")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Version:
    """One installed patchkit: ``label`` (before / after), what it was built from, its command."""

    label: str
    source: str  # a git revision, or "the working tree"
    venv: Path
    env: dict[str, str]  # its own user cache, so versions never share cached results

    @property
    def patchkit(self) -> str:
        return str(self.venv / "bin" / "patchkit")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def _source_tree(rev: str | None, dest: Path) -> None:
    """The files of ``rev`` (None: the working tree, uncommitted changes included) in ``dest``."""
    dest.mkdir(parents=True)
    if rev is not None:
        archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, check=True, capture_output=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def install(label: str, rev: str | None, workdir: Path, extras: str = "") -> Version:
    """A fresh virtualenv with ``rev`` (None: the working tree) installed the way users install
    patchkit: a regular (not editable) ``pip install``, bytecode compiled; with ``extras``
    (e.g. ``fleet``: ansible-core), ``pip install 'SRC[extras]'``."""
    home = workdir / f"venv-{label}"
    shutil.rmtree(home, ignore_errors=True)
    short = _short(rev or "HEAD")
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    source = (f"the working tree (on {short}{', with uncommitted changes' if dirty else ''})" if rev is None
              else f"revision {rev}" + ("" if short.startswith(rev) else f" ({short})"))
    say(f"installing patchkit{f'[{extras}]' if extras else ''} from {source} into {home}")
    _source_tree(rev, home / "src")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", f"{home / 'src'}{f'[{extras}]' if extras else ''}"],
                   check=True, env=env)
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import patchkit, os; print(os.path.dirname(patchkit.__file__))"],
                          check=True, capture_output=True, text=True, env=env, cwd=home).stdout.strip()
    if not Path(site).resolve().is_relative_to(venv.resolve()):
        raise SystemExit(f"the {label} virtualenv imports patchkit from {site}, not from its install")
    subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", site], check=True, env=env)
    return with_cache(Version(label, source, venv, {}), "cache")


def _short(rev: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True,
                          text=True).stdout.strip() or rev


def with_cache(version: Version, name: str) -> Version:
    """``version`` with a user cache of its own (``name``, beside its virtualenv)."""
    cache = version.venv.parent / name
    return replace(version, env={"XDG_CACHE_HOME": str(cache), "PATCHKIT_CACHE_DIR": str(cache / "patchkit")})


def empty_cache(version: Version) -> None:
    shutil.rmtree(version.env["XDG_CACHE_HOME"], ignore_errors=True)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a measured command: the user's, without a catalog or config of theirs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PATCHKIT_CATALOG", "PATCHKIT_CONFIG", "PYTHONDONTWRITEBYTECODE")}
    return {**env, **GIT_ENV, **(extra or {})}


def cli(version: Version, *args: str) -> str:
    """Run ``patchkit ARGS`` (untimed set-up, the user's upstream cache); its stdout, or stop
    the benchmark on failure."""
    proc = subprocess.run([version.patchkit, *args], cwd=NEUTRAL, capture_output=True, text=True,
                          env=_env())
    if proc.returncode != 0:
        raise SystemExit(f"patchkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return proc.stdout


@dataclass(frozen=True)
class Sample:
    seconds: float
    rss_kb: int
    stdout: str = ""


def measure(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
            stdin: str | None = None, ok: tuple[int, ...] = (0,)) -> Sample:
    """Wall time and peak RSS of one command; an exit code not in ``ok`` stops the benchmark."""
    # /usr/bin/time -f %M, not this process's wait4: a child forked from this Python process
    # would report this process's memory as its own peak.
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss, \
            open(stdin or os.devnull, "rb") as fin:
        start = time.perf_counter()
        proc = subprocess.run([TIME, "-f", "%M", "-o", rss.name, *argv], cwd=cwd, env=_env(env),
                              stdin=fin, capture_output=True)
        seconds = time.perf_counter() - start
        if proc.returncode not in ok:
            raise SystemExit(f"{' '.join(argv[:8])} ... failed ({proc.returncode}) in {cwd}:\n"
                             f"{proc.stderr.decode(errors='replace')[-3000:]}")
        rss_kb = int(rss.read().split()[-1])
    return Sample(seconds, rss_kb, proc.stdout.decode(errors="replace"))


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def tool_version(argv: list[str], prefix: str = "") -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True)
    except OSError:
        return f"{argv[0]} missing"
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return prefix + lines[0].split(",")[0] if lines else argv[0]


def machine() -> str:
    """One line of machine facts for a section."""
    cpu = ""
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = f" ({found.group(1).strip()})" if found else ""
    except OSError:
        pass
    return (f"Machine: {os.cpu_count()} cores{cpu}, {platform.system()}, Python "
            f"{platform.python_version()}, {tool_version(['git', '--version'])}, "
            f"{tool_version(['patch', '--version'])}, {tool_version(['quilt', '--version'], 'quilt ')}, "
            f"{tool_version(['ssh', '-V'])}; 1-minute load average {os.getloadavg()[0]:.1f} "
            "when the run ended (other work on the machine shows up as spread between median and min).")


def unified_diff(old: bytes, new: bytes, path: str) -> str:
    """A git-style diff of one modified file, as ``patchkit new`` writes it."""
    a, b = (re.findall(r"[^\n]*\n|[^\n]+$", side.decode("utf-8", "surrogateescape"))
            for side in (old, new))
    out = [f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"]
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n")
        for tag, a1, a2, b1, b2 in group:
            out += _body(" ", a[a1:a2]) if tag == "equal" else _body("-", a[a1:a2]) + _body("+", b[b1:b2])
    return "".join(out)


def _range(start: int, length: int) -> str:
    return f"{start + 1 if length else start}" + ("" if length == 1 else f",{length}")


def _body(sign: str, lines: list[str]) -> list[str]:
    return [sign + line if line.endswith("\n") else f"{sign}{line}\n\\ No newline at end of file\n"
            for line in lines]


def write_section(doc: Path, section: str, first: bool = False) -> None:
    """Put ``section`` (starting with its ``## `` heading) in ``doc`` in place of the section with
    the same heading, up to the next ``## ``; else after the preamble (``first``) or at the end."""
    heading = section.split("\n", 1)[0]
    text = doc.read_text() if doc.exists() else PREAMBLE
    start = text.find(heading + "\n")
    if start < 0:
        at = text.find("\n## ") + 1 if first and "\n## " in text else len(text)
        text = text[:at].rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n\n" + text[at:]
    else:
        end = text.find("\n## ", start + len(heading))
        rest = "\n" + text[end + 1:] if end >= 0 else ""
        text = text[:start] + section.rstrip("\n") + "\n" + rest
    doc.write_text(text.rstrip("\n") + "\n")

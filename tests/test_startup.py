"""The model's records act as frozen dataclasses, `patchkit --version` answers as click does,
and the commands import only what they use."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.catalog.manifest import load_manifest
from patchkit.catalog.model import Check, Fix, Upstream
from patchkit.results import CheckResult, OpResult
from tests.test_cli import INDEX_K, Env, env  # noqa: F401  (fixture)
from tests.test_cli_summaries import run_counting_imports

CATALOG = Path(__file__).parent / "samples" / "catalog"


def test_records_act_as_frozen_dataclasses() -> None:
    fix = load_manifest(CATALOG / "manifests" / "index-k-bytes.toml")
    assert dataclasses.is_dataclass(fix) and isinstance(fix, Fix)
    assert [f.name for f in dataclasses.fields(Upstream)] == [
        "base_release", "releases", "project", "root", "forwarding", "reference", "bug", "origin",
        "applied"]
    newer = dataclasses.replace(fix, version=fix.version + 1)
    assert newer.version == fix.version + 1 and newer.patches == fix.patches and newer != fix
    assert dataclasses.replace(newer, version=fix.version) == fix
    assert load_manifest(CATALOG / "manifests" / "index-k-bytes.toml") == fix
    up = Upstream("0.5.21", ("0.5.21",))
    assert hash(up) == hash(Upstream("0.5.21", ("0.5.21",))) and up != Upstream("0.5.21", ())
    assert repr(up) == ("Upstream(base_release='0.5.21', releases=('0.5.21',), project='sglang', "
                        "root='sglang', forwarding='not-forwarded', reference='', bug='', "
                        "origin='', applied='')")
    assert dataclasses.asdict(fix.upstream)["releases"] == ("0.5.20", "0.5.21")
    assert Check("grep", {"path": "a"}).params["path"] == "a"
    with pytest.raises(dataclasses.FrozenInstanceError):
        up.root = "serve"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del fix.name  # type: ignore[misc]
    check = CheckResult("grep", "n", True, "", "sglang:x")
    result = OpResult("apply", True, False, "t", (), (), (), {"op": "apply"})
    assert dataclasses.replace(result, ok=False).ok is False and result.ok is True
    assert check == CheckResult("grep", "n", True, "", "sglang:x") and check != up


def test_version_is_answered_by_click_without_loading_the_catalog() -> None:
    code = ("import sys\nfrom patchkit.cli.main import main\ntry:\n    main(['--version'])\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "print(sorted(m for m in ('patchkit.catalog.model', 'patchkit.cli.ops', 'rich')\n"
            "             if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.splitlines() == ["patchkit, version 0.1.0", "[]"]


def test_the_program_leaves_its_heap_to_the_exit_and_its_output_whole(tmp_path: Path) -> None:
    """The ``patchkit`` program (``entry``: the console script and ``python -m patchkit``)
    freezes the collector as it ends, so Python's finalization does not collect the whole heap
    a command made (docs/performance.md); what it printed still reaches a file whole, and its
    exit code is the command's. ``main``, for a caller in the same process, freezes nothing."""
    probe = ("import atexit, gc, sys\nfrom patchkit.cli.main import entry, main\n"
             "atexit.register(lambda: sys.stderr.write('frozen %d\\n' % (gc.get_freeze_count() > 0)))\n"
             "(entry if sys.argv[1] == 'entry' else main)(sys.argv[2:])\n")
    for how, frozen in (("entry", 1), ("main", 0)):
        out = tmp_path / f"{how}.out"
        with out.open("w") as fh:
            proc = subprocess.run([sys.executable, "-c", probe, how, "list", "--all"], stdout=fh,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
        assert proc.returncode == 0 and f"frozen {frozen}" in proc.stderr, proc.stderr
        assert "dsv4-bf16-sizing" in out.read_text() and out.read_text().endswith("\n")
    bad = subprocess.run([sys.executable, "-m", "patchkit", "show", "no-such-fix"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no-such-fix" in bad.stderr, bad.stderr


#: Modules a local apply or status never needs: rich draws only on a terminal, GitPython only
#: for the client's own repository work (authoring, rebase), tomlkit only to edit a manifest or
#: report where one is broken, socket nothing (the host name comes from os.uname).
NEVER_ON_A_PIPE = ("rich", "git", "tomlkit", "socket")


#: What a status of a checkout never uses: it starts no process (subprocess), makes no diff
#: and refuses nothing (difflib: diffs and "Did you mean"), reports no bug (traceback), reads
#: no installed package's RECORD (base64, csv), removes no directory (shutil).
NOT_FOR_A_STATUS = ("subprocess", "difflib", "traceback", "base64", "csv", "shutil")

#: patchkit's own modules a status of recorded fixes never uses: the commands that change a
#: target and their hooks, the checks (and apply's automatic ones), the search for an
#: unrecorded fix's change, git (the release comes from the tree's version file).
STATUS_RUNS_NONE = ("patchkit.cli.ops", "patchkit.hooks", "patchkit.engine.checks",
                    "patchkit.engine.auto", "patchkit.engine.presence", "patchkit.engine.gitcli")


def test_apply_and_status_on_a_pipe_import_only_what_they_use(env: Env) -> None:
    """The import rules the startup ratios rest on (docs/performance.md, issue 29): a local
    apply piped (plain lines) loads neither rich, GitPython nor tomlkit; a status of a target
    whose fixes are all recorded loads no git code of the engine (only an unrecorded revert
    fix needs it), parses no series (so unidiff stays out) and none of the standard library
    modules only other work needs (``NOT_FOR_A_STATUS``)."""
    code, out, loaded = run_counting_imports(env, "apply", INDEX_K, "--target", str(env.sglang),
                                             watched=NEVER_ON_A_PIPE)
    assert code == 0, out
    assert f"applied {INDEX_K}" in out and loaded == []
    only = env.catalog / "manifests"
    for manifest in only.glob("*.toml"):  # the catalog: the applied fix alone, all recorded
        if manifest.stem != INDEX_K:
            manifest.unlink()
    code, out, loaded = run_counting_imports(
        env, "status", "--target", str(env.sglang),
        watched=(*NEVER_ON_A_PIPE, *NOT_FOR_A_STATUS, *STATUS_RUNS_NONE, "unidiff",
                 "patchkit.engine.gitops", "patchkit.engine.revert"))
    assert code == 0, out
    assert INDEX_K in out and "applied" in out and loaded == []


#: The modules whose records a local apply or status builds at import (docs/performance.md,
#: "Startup"): about fifty classes, made at every start of patchkit.
RECORD_MODULES = (
    "patchkit.catalog", "patchkit.catalog.model", "patchkit.catalog.patchmail", "patchkit.results",
    "patchkit.targets", "patchkit.hooks", "patchkit.interop", "patchkit.engine.checks",
    "patchkit.engine.gitcli", "patchkit.engine.gitops", "patchkit.engine.hunks",
    "patchkit.engine.paths", "patchkit.engine.plan", "patchkit.engine.presence",
    "patchkit.engine.record", "patchkit.engine.records", "patchkit.engine.request",
    "patchkit.engine.revert", "patchkit.engine.workspace")


def test_records_compile_no_method() -> None:
    """``dataclasses`` compiles each method it writes, at every start; the records of the
    start-up path take all of theirs (``__init__``, ``__eq__``, ``__hash__``, ``__repr__`` and
    a frozen record's ``__setattr__``/``__delattr__``) from one shared implementation
    (``patchkit.engine.recordbase``), so nothing is compiled for any of them; and each is
    documented (a record without a docstring has ``inspect.signature`` computed for one)."""
    import importlib

    from patchkit.engine.recordbase import Record

    generated = {}
    records = frozen = 0
    for name in RECORD_MODULES:
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls):
                records += 1
                frozen += issubclass(cls, Record)
                made = sorted(k for k, v in vars(cls).items()
                              if getattr(getattr(v, "__code__", None), "co_filename", "") == "<string>")
                if made:
                    generated[cls.__qualname__] = made
                assert cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("), cls
    assert records >= 45 and frozen >= 35 and generated == {}


def test_list_reads_the_catalog_without_the_editor_or_the_patch_reader(env: Env) -> None:
    """``patchkit list`` reads manifests; it edits none (tomlkit) and parses no patch (unidiff):
    what it warns about (a placeholder rationale, no verification) is a question about the fix
    read, not about a manifest being written. ``show`` parses the series it lists the files of."""
    code, out, loaded = run_counting_imports(env, "list", "--all",
                                             watched=(*NEVER_ON_A_PIPE, "unidiff"))
    assert code == 0, out
    assert INDEX_K in out and loaded == []
    code, out, loaded = run_counting_imports(env, "show", INDEX_K, watched=("unidiff",))
    assert code == 0 and "python/sglang/srt/pool.py" in out and loaded == ["unidiff"], (out, loaded)

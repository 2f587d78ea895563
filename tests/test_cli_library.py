"""The library face the CLI sits on: ``from patchkit import ...`` and docs/api.md's example."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import patchkit
from patchkit import errors
from tests.test_cli import INDEX_K, POOL, SAMPLES, Env, env, git  # noqa: F401  (env is a fixture)

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"
CLIENT_ONLY = ("tomlkit", "rich", "click", "unidiff", "git")


def test_import_patchkit_loads_no_client_dependency() -> None:
    """The engine imports the package on hosts without tomlkit, rich, click, unidiff, GitPython."""
    code = (
        "import sys, patchkit, patchkit.engine\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {CLIENT_ONLY!r}))\n"
        "from patchkit import Catalog\n"
        "print('patchkit.catalog' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True"]


def test_every_exported_name_resolves_to_its_module() -> None:
    from patchkit import api, results, targets

    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", patchkit.__version__)
    for name in patchkit.__all__:
        assert getattr(patchkit, name) is not None, name
        assert name in dir(patchkit)
    assert patchkit.apply is api.apply and patchkit.status is api.status
    assert patchkit.LocalTarget is targets.LocalTarget and patchkit.OpResult is results.OpResult
    error_classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.PatchkitError)}
    assert error_classes <= set(patchkit.__all__)
    assert all(getattr(patchkit, n) is getattr(errors, n) for n in error_classes)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        patchkit.nope  # noqa: B018


def _doc_example() -> str:
    text = DOC.read_text()
    section = text.split("## Example", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/api.md has no python example"
    return match.group(1)


def test_the_api_doc_example_runs(env: Env) -> None:  # noqa: F811
    # the checkout the doc describes: the sample tree as it is, its release in version.py
    (env.sglang / "python/sglang/_version.py").unlink()
    shutil.copy(SAMPLES / "tree/sglang/python/sglang/version.py", env.sglang / "python/sglang")
    env.commit("the sample tree as it is")
    assert "`python/sglang/version.py` says `0.5.21`" in " ".join(DOC.read_text().split())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_doc_example(), str(DOC), "exec"), {"__name__": "api_example"})
    assert out.getvalue() == f"{INDEX_K}: {POOL} hunk #1 at line 3 (offset +0)\n"
    assert git(env.sglang, "status", "--porcelain") == ""


def test_a_failed_check_carries_every_check_the_engine_ran(env: Env) -> None:  # noqa: F811
    (env.sglang / "python/sglang/_version.py").write_text("__version__ = '0.5.19'\n")
    env.commit("0.5.19")
    catalog, target = patchkit.Catalog(env.catalog), patchkit.resolve_target(str(env.sglang))
    with pytest.raises(patchkit.PreconditionFailed) as caught:
        patchkit.apply(catalog, target, [INDEX_K])
    err = caught.value
    assert err.exit_code == errors.EXIT_CHECK_FAILED
    [fix] = err.result.fixes
    assert fix.name == INDEX_K and fix.version == 2
    by_kind = {c.kind: c for c in fix.preconditions}
    assert not by_kind["release"].ok and "0.5.19" in by_kind["release"].detail
    assert by_kind["git-clean"].ok and by_kind["writable"].ok
    assert err.to_dict()["type"] == "PreconditionFailed"


def test_version_loads_no_command_module_or_heavy_dependency() -> None:
    # Start-up is paid on every call a fleet script makes; --version must stay near the
    # interpreter + click floor (docs/performance.md).
    code = (
        "import sys\n"
        "from patchkit.cli.main import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('git', 'tomlkit', 'rich', 'unidiff', 'patchkit.catalog', 'patchkit.cli.ops')\n"
        "         if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out, out


def test_the_api_doc_names_every_parameter_of_the_public_calls() -> None:
    """docs/api.md writes each call with all its parameters, in order: a parameter added to
    the code and not to the doc (ssh_options, commit, modules were) fails here."""
    import inspect

    text = " ".join(DOC.read_text().split())
    for call in (patchkit.resolve_target, patchkit.apply, patchkit.rollback, patchkit.verify,
                 patchkit.status, patchkit.LocalTarget, patchkit.RemoteTarget):
        found = re.search(r"`%s\(([^`]*)\)" % call.__name__, text)
        assert found, f"docs/api.md does not write {call.__name__}(...)"
        flat = re.sub(r"\[[^\]]*\]", "", found.group(1))  # Mapping[str, str] -> Mapping
        documented = [re.split(r"[:=]", p)[0].strip() for p in flat.split(",")]
        documented = [p for p in documented if p != "*"]
        assert documented == list(inspect.signature(call).parameters), call.__name__


def test_docs_api_names_resolve_from_a_bare_import() -> None:
    """docs/api.md's names, after nothing but ``import patchkit`` in a fresh interpreter:
    ``patchkit.api`` (the module) and ``sync`` beside the other operations."""
    code = ("import patchkit\n"
            "print(patchkit.api.sync is patchkit.sync, patchkit.api.apply is patchkit.apply)\n"
            "from patchkit import sync\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]

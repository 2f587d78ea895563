"""The model's records act as frozen dataclasses, and `patchkit --version` answers as click does."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.catalog.manifest import load_manifest
from patchkit.catalog.model import Check, Fix, Upstream
from patchkit.results import CheckResult, OpResult

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

"""The RECORD proof of an installed package (kind ``record-clean``) and the ``lost`` state, on a
site-packages laid out as pip leaves it: the package, and ``sglang-X.dist-info/RECORD``
listing each file's sha256 (urlsafe base64, no padding). tests/test_installed.py does the
same with the real 0.5.23 wheel installed by pip; these cover the pitfalls one by one."""

from __future__ import annotations

import base64
import os
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List

from patchkit.engine import run

from .helpers import MOD, file_record, fix, module_text, request

INSTALLED = "sglang/srt/mod.py"  # MOD as installed


def make_site(base: Path, *, unlisted: bool = False, no_hash: bool = False,
              editable: bool = False) -> Path:
    site = base / "site-packages"
    files = {"sglang/__init__.py": "", "sglang/_version.py": "__version__ = version = '0.5.21'\n",
             "sglang/srt/__init__.py": "", INSTALLED: module_text()}
    rows = []
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        if rel == INSTALLED and unlisted:
            continue
        hashed = "" if rel == INSTALLED and no_hash else "sha256=" + digest.decode()
        rows.append("%s,%s,%s" % (rel, hashed, len(text) if hashed else ""))
    dist = site / "sglang-0.5.21.dist-info"
    dist.mkdir()
    rows.append("sglang-0.5.21.dist-info/RECORD,,")
    (dist / "RECORD").write_text("\n".join(rows) + "\n")
    if editable:
        (dist / "direct_url.json").write_text(json.dumps(
            {"url": "file:///src/sglang/python", "dir_info": {"editable": True}}))
    return site


def mod_fix(site: Path, name: str = "a", old: str = "return x + 7\n", new: str = "return x * 7\n"
            ) -> Dict[str, Any]:
    before = (site / INSTALLED).read_text()
    return fix(name, [file_record(MOD, before, before.replace(old, new))])


def apply(site: Path, *fixes: Dict[str, Any]) -> Dict[str, Any]:
    return run(request("apply", {"sglang": site}, list(fixes)))


def record_checks(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    found = (result["error"]["details"]["failures"] if result["error"]
             else [p for f in result["fixes"] for p in f["preconditions"]])
    return [p for p in found if p["kind"] == "record-clean"]


def test_a_pristine_installed_file_is_proven_by_record(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    result = apply(site, mod_fix(site))
    assert result["ok"], result["error"]
    [check] = record_checks(result)
    assert check["ok"] and check["detail"] == "matches the RECORD of sglang 0.5.21"
    # named as the file lies in site-packages (issue 25, item 11)
    assert check["where"] == "sglang:%s" % MOD[len("python/"):]


def test_an_installed_file_edited_by_hand_is_refused_by_name(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    fixes = mod_fix(site)
    (site / INSTALLED).write_text(module_text() + "# local edit\n")
    edited = (site / INSTALLED).read_bytes()
    result = apply(site, fixes)
    assert result["error"]["type"] == "PreconditionFailed"
    [check] = record_checks(result)
    assert not check["ok"] and "%s was modified outside patchkit" % check["where"] in check["detail"]
    assert "pip install --force-reinstall --no-deps sglang==0.5.21" in check["detail"]
    assert (site / INSTALLED).read_bytes() == edited and not (site / ".patchkit" / "state.json").exists()


def test_the_reinstall_advice_says_which_applied_fixes_it_loses(tmp_path: Path) -> None:
    """The way back a refusal gives, a forced reinstall of the wheel, rewrites every file of
    it: a fix applied there becomes ``lost``. The advice names those fixes and what puts them
    back after it (before, it said only to reinstall, and the user found them lost later)."""
    site = make_site(tmp_path)
    assert apply(site, mod_fix(site, "a"))["ok"]
    other, edited = "python/sglang/srt/__init__.py", "# a local edit\n"
    (site / "sglang/srt/__init__.py").write_text(edited)
    result = apply(site, fix("b", [file_record(other, edited, edited + "X = 1\n")]))
    assert result["error"]["type"] == "PreconditionFailed"
    [check] = record_checks(result)
    assert not check["ok"] and "pip install --force-reinstall --no-deps sglang==0.5.21" in check["detail"]
    assert "fixes applied there (a) become lost" in check["detail"], check["detail"]
    assert "patchkit sync" in check["detail"], check["detail"]
    assert status(site)["a"]["state"] == "applied"  # the refusal itself changed nothing


def test_no_hash_and_not_listed_give_no_proof_and_say_so(tmp_path: Path) -> None:
    site = make_site(tmp_path / "a", no_hash=True)
    [check] = record_checks(apply(site, mod_fix(site)))
    assert check["ok"] and check["detail"].startswith("not checked: ") and "without a hash" in check["detail"]
    site = make_site(tmp_path / "b", unlisted=True)
    [check] = record_checks(apply(site, mod_fix(site)))
    assert check["ok"] and check["detail"].startswith("not checked: ") and "not listed" in check["detail"]


def test_an_editable_install_gives_no_record_proof(tmp_path: Path) -> None:
    site = make_site(tmp_path, editable=True)
    (site / INSTALLED).write_text(module_text() + "# a checkout's edit\n")
    result = apply(site, mod_fix(site))
    assert result["ok"], result["error"]
    assert record_checks(result) == []


def test_a_file_patchkit_changed_is_vouched_by_its_state_not_record(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    assert apply(site, mod_fix(site, "a"))["ok"]
    result = apply(site, mod_fix(site, "b", "return x + 9\n", "return x * 9\n"))
    assert result["ok"], result["error"]
    [check] = record_checks(result)
    assert check["ok"] and "only by a fix patchkit applied" in check["detail"]


def status(site: Path) -> Dict[str, Any]:
    result = run(request("status", {"sglang": site}, []))
    assert result["ok"], result["error"]
    return {f["name"]: f for f in result["status"]["fixes"]}


def test_reinstalled_bytes_make_a_fix_lost_other_bytes_drifted(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    assert apply(site, mod_fix(site))["ok"]
    assert status(site)["a"]["state"] == "applied"

    (site / INSTALLED).write_text(module_text() + "# local edit\n")
    assert status(site)["a"]["state"] == "drifted"

    (site / INSTALLED).write_text(module_text())  # put back by hand: RECORD untouched
    assert status(site)["a"]["state"] == "drifted"
    record = site / "sglang-0.5.21.dist-info" / "RECORD"  # pip --force-reinstall writes it anew
    fresh = record.with_name("RECORD.new")
    fresh.write_bytes(record.read_bytes())
    os.replace(fresh, record)
    seen = status(site)["a"]
    assert seen["state"] == "lost"
    assert seen["detail"].startswith("sglang 0.5.21 reinstalled; recorded v1 no longer present")
    # the file as it lies in site-packages beside the patch's path (docs/containers.md)
    assert seen["files"] == [{"root": "sglang", "path": MOD, "where": "sglang:sglang/srt/mod.py",
                              "state": "reinstalled"}]

    # an upgrade: a new dist-info whose RECORD lists the bytes now there
    dist = site / "sglang-0.5.21.dist-info"
    dist.rename(site / "sglang-0.5.22.dist-info")
    assert "sglang 0.5.21 -> 0.5.22 reinstalled" in status(site)["a"]["detail"]


def test_rollback_of_a_lost_fix_keeps_the_reinstalled_file(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    applied = mod_fix(site)
    assert apply(site, applied)["ok"]
    (site / INSTALLED).write_text(module_text().replace("x + 3\n", "x + 3  # 0.5.22\n"))
    # the new release's RECORD
    digest = base64.urlsafe_b64encode(hashlib.sha256((site / INSTALLED).read_bytes()).digest())
    record = site / "sglang-0.5.21.dist-info" / "RECORD"
    rows = [r for r in record.read_text().splitlines() if not r.startswith(INSTALLED + ",")]
    record.write_text("\n".join(rows + ["%s,sha256=%s," % (INSTALLED, digest.rstrip(b"=").decode())]) + "\n")
    assert status(site)["a"]["state"] == "lost"
    new = (site / INSTALLED).read_bytes()

    result = run(request("rollback", {"sglang": site}, [applied]))
    assert result["ok"], result["error"]
    assert (site / INSTALLED).read_bytes() == new
    assert "a" not in status(site)

"""Which target a command line names: `--target` once, a venv or an interpreter's installed
sglang, a directory without SGLang refused, the checkout around the working directory.

Real things only: the sample catalog and checkout of tests/test_cli.py, real venvs made by
``python -m venv`` with a small sglang package (the sample tree's) in their site-packages.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from patchkit.errors import EXIT_TARGET, EXIT_USAGE, TargetError
from patchkit.targets import resolve_target
from tests.engine.helpers import make_checkout
from tests.test_cli import INDEX_K, POOL, SAMPLES, Env, Run, env, pk, snapshot  # noqa: F401

# -- item 10: --target given twice -----------------------------------------------------------

#: Every command that takes --target, with what else it needs.
TARGET_COMMANDS = [["apply", INDEX_K], ["rollback", INDEX_K], ["verify", INDEX_K], ["status"],
                   ["log"]]


@pytest.mark.parametrize("command", TARGET_COMMANDS, ids=lambda c: c[0])
def test_target_given_twice_is_refused(env: Env, pk: Callable[..., Run], tmp_path: Path,
                                       command: list[str]) -> None:
    """The last --target used to win silently; now neither is used (until fleet targets)."""
    other = make_checkout(tmp_path, name="other")
    before = snapshot(env.sglang, other)
    res = pk(*command, "--target", env.sglang, "-t", other)
    assert res.code == EXIT_USAGE, (res.out, res.err)
    assert "--target given 2 times" in res.err and str(other) in res.err
    assert str(env.sglang) in res.err
    assert snapshot(env.sglang, other) == before
    res = pk(*command, f"--target={env.sglang}", "--json", "--target", env.sglang)
    assert res.code == EXIT_USAGE
    assert json.loads(res.out)["error"]["type"] == "UsageError"
    assert snapshot(env.sglang, other) == before


@pytest.mark.parametrize("roots", [["--root", "serve={serve}", "--root", "serve={other}"],
                                   ["--target", "{sglang}", "--root", "sglang={other}"],
                                   ["--target", "{sglang}", "--root", "bad name={serve}"]],
                         ids=["root-twice", "sglang-root-and-target", "bad-root-name"])
@pytest.mark.parametrize("command", [["apply", INDEX_K], ["status"]], ids=lambda c: c[0])
def test_a_root_given_twice_or_badly_named_is_refused(
        env: Env, pk: Callable[..., Run], tmp_path: Path, roots: list[str],
        command: list[str]) -> None:
    """The second --root serve=, or a --root sglang= beside --target, used to win silently,
    so the run worked on another tree than the one named first; a root name with a space
    was taken. Each is a usage error now, naming both values, and nothing is written."""
    other = make_checkout(tmp_path, name="other")
    before = snapshot(env.sglang, other)
    values = {"sglang": env.sglang, "serve": env.serve, "other": other}
    args = [a.format(**values) for a in roots]
    if "--target" not in args:
        args = ["--target", str(env.sglang), *args]
    res = pk(*command, *args)
    assert res.code == EXIT_USAGE, (res.out, res.err)
    if "bad name" in " ".join(args):
        assert "'bad name' is not a root name" in res.err, res.err
    else:
        assert "given twice" in res.err or "both name the sglang root" in res.err, res.err
        assert str(other) in res.err, res.err
    assert snapshot(env.sglang, other) == before


def test_a_sglang_root_without_target_is_the_target_even_inside_another_checkout(
        env: Env, pk: Callable[..., Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--root sglang=PATH`` alone names the target: the checkout around the working
    directory is not looked for (it was, and said "found from the working directory")."""
    other = make_checkout(tmp_path, name="other")
    monkeypatch.chdir(other / "python" / "sglang")
    res = pk("apply", INDEX_K, "--root", f"sglang={env.sglang}", "--root", f"serve={env.serve}")
    assert res.code == 0, (res.out, res.err)
    assert "found from the working directory" not in res.err
    assert b"head_dim * 2" in (env.sglang / POOL).read_bytes()
    assert not (other / ".patchkit").exists()


# -- item 11: a directory without SGLang, a venv, python:INTERPRETER -------------------------


def _venv(base: Path, *, with_sglang: bool) -> tuple[Path, Path]:
    """A real venv (no pip: not needed), its site-packages holding the sample sglang package."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    if with_sglang:
        shutil.copytree(SAMPLES / "tree" / "sglang" / "python" / "sglang", site / "sglang")
    return venv, site


@pytest.mark.parametrize("where", ["empty-dir", "venv-without-sglang"])
@pytest.mark.parametrize("command", [["status"], ["apply", INDEX_K]], ids=lambda c: c[0])
def test_a_directory_without_sglang_is_a_target_error(env: Env, pk: Callable[..., Run],
                                                      tmp_path: Path, where: str,
                                                      command: list[str]) -> None:
    """It used to say `no fix applied or present`, exit 0: nothing was looked at."""
    if where == "empty-dir":
        target = tmp_path / "nothing"
        target.mkdir()
        (target / "somefile.py").write_text("x = 1\n")
    else:
        target, _site = _venv(tmp_path, with_sglang=False)
    before = snapshot(target)
    res = pk(*command, "--target", target)
    assert res.code == EXIT_TARGET, (res.out, res.err)
    assert "no `sglang` package found" in res.err
    if where == "empty-dir":  # where it looked
        assert str(target / "python" / "sglang") in res.err
        assert str(target / "sglang" / "__init__.py") in res.err
    else:  # the venv's interpreter was asked, and its sys.path is named
        assert str(target / "bin" / "python") in res.err and "sys.path" in res.err
    assert "no fix applied" not in res.out
    assert snapshot(target) == before


def test_a_venv_root_is_its_installed_sglang(env: Env, pk: Callable[..., Run],
                                             tmp_path: Path) -> None:
    venv, site = _venv(tmp_path, with_sglang=True)
    target = resolve_target(str(venv))
    assert target.roots["sglang"] == str(site)
    assert target.python == str(venv / "bin" / "python")  # verifications run in the venv
    res = pk("apply", INDEX_K, "--target", venv)
    assert res.code == 0, (res.out, res.err)
    assert f"target: {site} (the sglang of the venv {venv})" in res.err
    assert b"head_dim * 2" in (site / "sglang" / "srt" / "pool.py").read_bytes()
    res = pk("status", "--target", venv, "--json")
    assert res.code == 0
    states = {f["name"]: f["state"] for f in res.json()["status"]["fixes"]}
    assert states[INDEX_K] == "applied"


def test_python_interpreter_target_is_its_installed_sglang(env: Env, pk: Callable[..., Run],
                                                          tmp_path: Path) -> None:
    venv, site = _venv(tmp_path, with_sglang=True)
    python = venv / "bin" / "python"
    target = resolve_target(f"python:{python}")
    assert target.roots["sglang"] == str(site) and target.python == str(python)
    assert resolve_target(f"python:{python}", python="/other/python").python == "/other/python"
    res = pk("apply", INDEX_K, "--target", f"python:{python}")
    assert res.code == 0, (res.out, res.err)
    assert f"target: {site} (the sglang of {python})" in res.err
    assert b"head_dim * 2" in (site / "sglang" / "srt" / "pool.py").read_bytes()


def test_an_interpreter_that_is_not_there_is_a_target_error(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="does not exist"):
        resolve_target(f"python:{tmp_path / 'no' / 'python'}")


def test_python_command_name_is_the_one_on_path(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    venv, site = _venv(tmp_path, with_sglang=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:/usr/bin:/bin")
    target = resolve_target("python:python")
    assert target.roots["sglang"] == str(site) and target.python == str(venv / "bin" / "python")


# -- item 13: the checkout around the working directory ----------------------------------------


def test_the_checkout_around_the_working_directory_is_the_target(
        env: Env, pk: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(env.sglang / "python" / "sglang" / "srt")
    res = pk("apply", INDEX_K)
    assert res.code == 0, (res.out, res.err)
    assert f"target: {env.sglang} (found from the working directory)" in res.err
    assert b"head_dim * 2" in (env.sglang / POOL).read_bytes()
    assert (env.sglang / ".patchkit").is_dir()  # the checkout's root, not python/
    assert not (env.sglang / "python" / ".patchkit").exists()
    monkeypatch.chdir(env.sglang)
    res = pk("status", "--json")
    assert res.code == 0 and "found from the working directory" in res.err
    assert {f["name"]: f["state"] for f in res.json()["status"]["fixes"]}[INDEX_K] == "applied"


def test_a_given_target_wins_over_the_working_directory(
        env: Env, pk: Callable[..., Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = make_checkout(tmp_path, name="other")
    monkeypatch.chdir(other / "python" / "sglang")
    res = pk("status", "--target", env.sglang)
    assert res.code == 0 and "found from the working directory" not in res.err


def test_installed_package_around_the_working_directory_is_the_target(
        env: Env, pk: Callable[..., Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    site = tmp_path / "lib" / "site-packages"
    shutil.copytree(SAMPLES / "tree" / "sglang" / "python" / "sglang", site / "sglang")
    monkeypatch.chdir(site / "sglang" / "srt")
    res = pk("apply", INDEX_K)
    assert res.code == 0, (res.out, res.err)
    assert f"target: {site} (found from the working directory)" in res.err
    assert b"head_dim * 2" in (site / "sglang" / "srt" / "pool.py").read_bytes()


def test_outside_a_checkout_no_target_is_still_a_usage_error(
        env: Env, pk: Callable[..., Run]) -> None:
    res = pk("status")  # the env fixture's working directory holds no SGLang tree
    assert res.code == EXIT_USAGE and "no target given" in res.err


@pytest.mark.parametrize("args", [["status", "--lock-timeout", "-5"],
                                  ["rebase", INDEX_K, "--all", "--onto", "0.5.22", "-n"]],
                         ids=["negative-lock-timeout", "rebase-fixes-and-all"])
def test_options_that_contradict_themselves_are_usage_errors(
        env: Env, pk: Callable[..., Run], args: list[str]) -> None:
    """A negative --lock-timeout was taken; `rebase FIX --all` rebased FIX, --all silently
    dropped. Both exit 2, saying which option, with nothing changed."""
    before = snapshot(env.sglang, env.catalog)
    res = pk(*args) if args[0] == "rebase" else pk(*args, "--target", env.sglang)
    assert res.code == EXIT_USAGE, (res.out, res.err)
    assert ("--lock-timeout" in res.err) if "--lock-timeout" in args else ("not both" in res.err)
    assert snapshot(env.sglang, env.catalog) == before


def test_a_target_name_that_is_neither_a_directory_nor_a_named_target_says_both(
        env: Env, pk: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped target name said "root 'sglang' at CWD/prdo does not exist", as if a
    directory had been meant; now it names both readings and the config's targets."""
    config = tmp_path / "patchkit.toml"
    config.write_text(f'[targets.prod]\npath = "{env.sglang}"\n')
    monkeypatch.chdir(tmp_path)
    res = pk("--config", str(config), "status", "--target", "prdo")
    assert res.code == EXIT_TARGET, (res.out, res.err)
    assert "no such directory, and no target of that name" in res.err
    assert "its targets: prod" in res.err, res.err
    assert pk("--config", str(config), "status", "--target", "prod").code == 0


def test_an_ssh_program_that_cannot_run_names_the_option_to_fix(
        pk: Callable[..., Run], tmp_path: Path) -> None:
    """It said "set ssh_program", a setting the command line spells --ssh-program; nothing is
    sent anywhere (the program does not start)."""
    res = pk("status", "--target", "ssh://127.0.0.1/srv/sglang", "--ssh-program",
             str(tmp_path / "no-ssh"))
    assert res.code == EXIT_USAGE, (res.out, res.err)
    assert "cannot run the ssh program" in res.err and "--ssh-program" in res.err, res.err


def test_an_option_of_the_command_given_before_it_is_said_so(pk: Callable[..., Run]) -> None:
    """`patchkit --json status` answered "Did you mean '--version'?"; the option is the
    command's: it is told where to put it, in the JSON too, exit 2."""
    res = pk("--json", "status")
    assert res.code == EXIT_USAGE
    assert "--json is an option of `patchkit status`: put it after the command" in res.err
    assert "--json is an option" in json.loads(res.out)["error"]["message"]
    assert "No such option '--bogus'" in pk("--bogus", "status").err  # not a command's: as before


def test_a_fix_on_a_root_the_target_lacks_names_the_manifest_line(
        env: Env, pk: Callable[..., Run]) -> None:
    """The refusal named the root, not where the manifest names it (a typo there reads as a
    target missing a root)."""
    manifest = env.catalog / "manifests" / f"{INDEX_K}.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('root = "sglang"', 'root = "sglnag"', 1))
    line = next(i for i, t in enumerate(manifest.read_text().splitlines(), 1) if '"sglnag"' in t)
    res = pk("apply", INDEX_K, "--target", env.sglang, "--root", f"serve={env.serve}")
    assert res.code == EXIT_USAGE, (res.out, res.err)
    assert f"{manifest}:{line}" in res.err and "sglnag" in res.err, res.err


def test_an_unreachable_host_names_the_command_as_run(pk: Callable[..., Run]) -> None:
    """The error's command said `python3 -c` where patchkit runs `python3 -S -c` (only the
    agent program elided); a refused loopback port, nothing reaches a host."""
    res = pk("status", "--target", "ssh://127.0.0.1:1/srv/sglang", "--json")
    assert res.code == 10, (res.out, res.err)
    command = json.loads(res.out)["error"]["details"]["command"]
    assert "python3 -S -c" in command and "<patchkit agent>" in command, command

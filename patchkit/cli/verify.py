"""`patchkit verify`: rerun the verification of applied fixes.

Built like :mod:`patchkit.cli.apply`: :func:`run` is the command, callable by the fast path of
:mod:`patchkit.cli.main` without click; the click command (``COMMANDS``) is built on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import api
from . import render
from .common import TARGET_FAST_OPTIONS, State, emit_result, lazy_command, require_names

if TYPE_CHECKING:
    from .common import FastOptions

FAST_OPTIONS: FastOptions = dict(TARGET_FAST_OPTIONS)


def run(
    state: State,
    fixes: tuple[str, ...],
    target: str | None,
    roots: tuple[str, ...],
    python: str | None,
    lock_timeout: float,
    as_json: bool,
) -> int:
    """Run the verification checks of FIXES on the target; writes nothing."""
    names = require_names(fixes, "verify")
    tgt = state.target(target, roots, python)
    with render.busy(f"verifying {', '.join(names)} on {tgt.description}", quiet=as_json):
        result = api.verify(state.catalog(), tgt, names, lock_timeout=lock_timeout)
    return emit_result(result, as_json)


def _command() -> Any:
    import click

    from .common import json_option, pass_state, target_options

    @click.command("verify")
    @click.argument("fixes", nargs=-1)
    @target_options
    @json_option
    @pass_state
    def verify(state: State, **params: Any) -> int:
        """Run the verification checks of FIXES on the target; writes nothing."""
        return run(state, **params)

    return verify


__getattr__ = lazy_command(__name__, "verify", _command)

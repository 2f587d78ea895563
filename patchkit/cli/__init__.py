"""The command line: thin click commands over :mod:`patchkit.api`."""

from __future__ import annotations


def entry(argv: list[str] | None = None) -> None:
    """The ``patchkit`` program (its console script, ``python -m patchkit``): a signal from its
    first line on is kept until the CLI can say what it stopped (``errors.hold_signals``), then
    :func:`patchkit.cli.main.entry`. Only the standard library is loaded before the hold."""
    from ..errors import hold_signals

    hold_signals()
    from .main import entry as run

    run(argv)

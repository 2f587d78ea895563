"""The `patchkit` command group and the one boundary that turns errors into exit codes."""

from __future__ import annotations

import os
import sys
from importlib import import_module

import click

from .. import __version__
from ..errors import EXIT_INTERNAL, EXIT_USAGE, PatchkitError
from .common import State


#: Command name -> the module under patchkit.cli that defines it. Modules are imported only
#: when their command runs, so `patchkit --version` does not pay for GitPython, tomlkit or rich.
COMMAND_MODULES = {
    "list": "fixes",
    "show": "fixes",
    "apply": "apply",
    "verify": "verify",
    "status": "status",
    "rollback": "rollback",
    "log": "log",
    "new": "authoring",
    "refresh": "authoring",
    "upstream": "upstream",
    "demo": "demo",
    "rebase": "rebase",
    "diff": "diff",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is None:
            return None
        for command in import_module(f"{__package__}.{module}").COMMANDS:
            if command.name == cmd_name:
                return command
        raise RuntimeError(f"patchkit.cli.{module} does not define the command {cmd_name!r}")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="patchkit")
@click.option("--catalog", "catalog_dir", metavar="DIR", help="Catalog directory (holds manifests/ and patches/).")
@click.option("--config", "config_path", metavar="FILE", help="Project config (default: ./patchkit.toml).")
@click.option("--debug", is_flag=True, envvar="PATCHKIT_DEBUG", help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, catalog_dir: str | None, config_path: str | None, debug: bool) -> None:
    """Versioned patch series for a patched SGLang, applied all-or-nothing."""
    state = ctx.ensure_object(State)
    state.catalog_dir = catalog_dir
    state.config_path = config_path
    state.debug = debug


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure leaves here with a documented exit code (docs/cli.md)."""
    ctx_state = State()
    try:
        rc = cli.main(args=argv, prog_name="patchkit", standalone_mode=False, obj=ctx_state)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.stderr.write("aborted\n")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
    except PatchkitError as err:
        from ..render import print_json, render_error

        if ctx_state.json:
            result = getattr(err, "result", None)
            payload = dict(result.to_json()) if result is not None else {}
            payload.update(ok=False, error=err.to_dict())
            print_json(payload)
        render_error(None, err)
        if ctx_state.debug:
            import traceback

            traceback.print_exc()
        sys.exit(err.exit_code)
    except Exception as exc:  # the "bug" exit: a traceback only with --debug
        if ctx_state.debug or os.environ.get("PATCHKIT_DEBUG"):
            import traceback

            traceback.print_exc()
        sys.stderr.write(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "this is a bug in patchkit; rerun with --debug for the traceback and report it\n"
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(rc or 0)

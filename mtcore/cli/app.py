"""The ``mtcore`` command. The one place an error becomes ``Error: ...`` and an exit code."""

from __future__ import annotations

import logging
from typing import Any

import click

from mtcore import __version__
from mtcore.cli.checks import lock, validate, verify
from mtcore.cli.datasets import datasets
from mtcore.cli.running import compare, run
from mtcore.cli.serving import serve
from mtcore.cli.show import plan, plugins, report
from mtcore.cli.translate import export, translate
from mtcore.contracts.errors import MtcoreError


class ErrorBoundary(click.Group):
    """Turns MtcoreError (and only with --debug, its traceback) into a one-line message."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MtcoreError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=ErrorBoundary)
@click.version_option(__version__, prog_name="mtcore")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build machine-translation systems from YAML recipes."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    _console_logging(debug)


cli.add_command(validate)
cli.add_command(lock)
cli.add_command(verify)
cli.add_command(plan)
cli.add_command(run)
cli.add_command(compare)
cli.add_command(report)
cli.add_command(plugins)
cli.add_command(translate)
cli.add_command(serve)
cli.add_command(export)
cli.add_command(datasets)


def _console_logging(debug: bool) -> None:
    """Warnings (everything with --debug) to stderr; the run log in the workdir gets INFO."""
    logger = logging.getLogger("mtcore")
    for handler in list(logger.handlers):
        if getattr(handler, "_mtcore_console", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler()
    handler._mtcore_console = True  # type: ignore[attr-defined]
    handler.setLevel(logging.DEBUG if debug else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)


_PLUGIN_COMMANDS: list[bool] = []


def with_plugin_commands() -> click.Group:
    """The command group with the commands that installed packages add through the
    ``mtcore_add_commands`` hook (the shipped plugins add ``evaluate``), added once."""
    if not _PLUGIN_COMMANDS:
        from mtcore.report.hooks import make_plugin_manager

        make_plugin_manager().hook.mtcore_add_commands(cli=cli)
        _PLUGIN_COMMANDS.append(True)
    return cli


def main() -> None:
    from mtcore.exec.process import safe_children, safe_torch_loads, thread_defaults

    thread_defaults()  # both before any worker process starts
    safe_torch_loads()
    safe_children()

    with_plugin_commands()(obj={})

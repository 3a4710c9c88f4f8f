"""Lifecycle hooks: events only, never components."""

from __future__ import annotations

import os
from typing import Any

import click

from mtcore.api import hookimpl


@hookimpl
def mtcore_step_finished(step_id: str, kind: str, manifest: dict[str, Any]) -> None:
    target = os.environ.get("MTCORE_EXAMPLE_LOG")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(f"{step_id}\t{kind}\t{manifest['hash']}\n")


@hookimpl
def mtcore_add_commands(cli: Any) -> None:
    @cli.command("example-hello")
    def hello() -> None:
        """Say hello from the example plugin."""
        click.echo("hello from mtcore-example-plugin")

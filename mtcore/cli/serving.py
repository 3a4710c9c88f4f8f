"""``mtcore serve``: stages of a finished run or exported systems kept loaded behind an HTTP
JSON API (see mtcore.system.serve)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from mtcore.cli.common import default_workdir, load, optional_recipe_options
from mtcore.cli.translate import STAGE, WORKDIR
from mtcore.contracts.errors import MtcoreError
from mtcore.system.serve import Limits

DEFAULTS = Limits()
POSITIVE = click.IntRange(1, 1 << 30)


@click.command()
@optional_recipe_options
@click.option(
    "--system",
    "system_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="An exported system (mtcore export) instead of RECIPE; repeat for more directions.",
)
@WORKDIR
@click.option(
    "--direction",
    "-d",
    "directions",
    multiple=True,
    help="en-ja or enja; repeatable (default: every direction of the recipe).",
)
@STAGE
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=5000,
    show_default=True,
    help="Port (LibreTranslate's); 0 picks a free one and prints it.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default=None,
    help="Decode on this device (default: what the recipe's steps say).",
)
@click.option("--repair", is_flag=True, help="Repair invalid UTF-8 and NUL bytes, as translate.")
@click.option(
    "--max-body", type=POSITIVE, default=DEFAULTS.max_body, show_default=True, help="Bytes a body."
)
@click.option(
    "--max-lines", type=POSITIVE, default=DEFAULTS.max_lines, show_default=True,
    help="Lines a request.",
)  # fmt: skip
@click.option(
    "--max-chars", type=POSITIVE, default=DEFAULTS.max_chars, show_default=True,
    help="Characters a line.",
)  # fmt: skip
@click.option(
    "--batch-lines",
    type=POSITIVE,
    default=DEFAULTS.batch_lines,
    show_default=True,
    help="Most lines of concurrent requests translated in one call.",
)
@click.option(
    "--batch-wait-ms",
    type=click.FloatRange(0, 10_000),
    default=DEFAULTS.batch_wait * 1000,
    show_default=True,
    help="How long a batch waits for more requests.",
)
@click.option("--quiet", "-q", is_flag=True, help="Do not log requests to stderr.")
def serve(
    recipe: Path | None,
    profile: str | None,
    sets: tuple[str, ...],
    system_dirs: tuple[Path, ...],
    workdir: Path | None,
    directions: tuple[str, ...],
    stage: str | None,
    host: str,
    port: int,
    device: str | None,
    repair: bool,
    quiet: bool,
    **limits: Any,
) -> None:
    """Keep stages of a system loaded and translate over HTTP, in LibreTranslate's shape:
    POST /translate {"q": text or [texts], "source": "en", "target": "ja"} answers
    {"translatedText": ...}; GET /languages lists the pairs. Concurrent requests are
    translated together; the output is mtcore translate's for the same lines."""
    from mtcore.system.inference import REPAIR, STRICT_KEEP, Translator, build_hint, stages
    from mtcore.system.serve import serving

    private = contextlib.ExitStack()
    if system_dirs:
        from mtcore.contracts.registry import load_registry
        from mtcore.recipe.hashing import private_conversions
        from mtcore.system.export import load_system

        if recipe is not None or workdir is not None or directions:
            raise MtcoreError("--system replaces RECIPE, --workdir and --direction")
        registry = load_registry()
        private.enter_context(private_conversions())  # never into the user's cache (issue 70)
        systems = [load_system(d, registry, device, False) for d in system_dirs]
    else:
        if recipe is None:
            raise MtcoreError("give RECIPE (and --workdir), or --system DIR")
        registry, loaded, _ = load(recipe, profile, sets)
        where = default_workdir(loaded, workdir)
        hint = build_hint(recipe, profile, where)
        wanted = directions or list(dict.fromkeys(s.direction for s in stages(loaded)))
        systems = [
            Translator.from_run(loaded, registry, where, d, stage, device, build_hint=hint)
            for d in wanted
        ]
    settings = Limits(
        limits["max_body"], limits["max_lines"], limits["max_chars"], limits["batch_lines"],
        limits["batch_wait_ms"] / 1000,
    )  # fmt: skip
    log = None if quiet else (lambda line: click.echo(line, err=True))
    policy = REPAIR if repair else STRICT_KEEP
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    with private, serving(systems, host, port, settings, policy, log) as server:
        names = ", ".join(f"{s.stage.direction} {s.stage.name}" for s in systems)
        click.echo(f"mtcore serve: http://{host}:{server.server_address[1]} ({names})")
        sys.stdout.flush()
        while not stop.wait(0.5):
            pass
    click.echo("mtcore serve: stopped", err=True)

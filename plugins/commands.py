"""Commands the shipped plugins add to ``mtcore`` through the ``mtcore_add_commands`` hook:
``mtcore evaluate``, sacrebleu's command line with this package's metric plugins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from mtcore.api import MtcoreError, hookimpl, load_registry


@click.command("evaluate")
@click.option("--hyp", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--ref",
    "refs",
    required=True,
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Reference file (repeat for several references).",
)
@click.option("--lang", required=True, help="Target language (picks the BLEU tokenizer).")
@click.option("--metric", "metrics", multiple=True, default=("bleu", "chrf"), show_default=True)
@click.option(
    "--tokenize",
    default=None,
    help="BLEU tokenizer (default: by language; 13a, zh, ja-mecab, char, ...).",
)
def evaluate_command(
    hyp: Path, refs: tuple[Path, ...], lang: str, metrics: tuple[str, ...], tokenize: str | None
) -> None:
    """Score a hypothesis file against one or more references, with signatures."""
    from mtcore.api.engine import build_metrics, check_lengths, evaluate, read_segments

    hyps = read_segments(hyp)
    references = [read_segments(r) for r in refs]
    check_lengths(hyps, references, [str(r) for r in refs])
    entries: list[Any] = [
        {"name": m, "tokenize": tokenize} if m == "bleu" and tokenize else m for m in metrics
    ]
    try:
        plugins = build_metrics(load_registry(), entries)
    except ValidationError as exc:
        raise MtcoreError(f"--tokenize {tokenize!r}: {exc.errors()[0]['msg']}") from exc
    for score in evaluate(plugins, hyps, references, lang):
        click.echo(str(score))


@hookimpl
def mtcore_add_commands(cli: Any) -> None:
    cli.add_command(evaluate_command)

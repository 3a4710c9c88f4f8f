"""``mtcore translate`` and ``mtcore export``: new text through a stage of a finished run or of
an exported system (see mtcore.system.inference and mtcore.system.export)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mtcore.cli.common import default_workdir, load, optional_recipe_options, recipe_options
from mtcore.contracts.errors import MtcoreError

if TYPE_CHECKING:
    from mtcore.system.inference import Translator

WORKDIR = click.option(
    "--workdir",
    "-w",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The finished run's workdir (default: work/<recipe name>).",
)
DIRECTION = click.option(
    "--direction", "-d", default=None, help="en-ja or enja (default: the recipe's only one)."
)
STAGE = click.option(
    "--stage",
    "-s",
    default=None,
    help="A stage of the recipe (default: the one its `submitted` names for the direction, "
    "else the direction's last; --list-stages marks it).",
)


@click.command()
@optional_recipe_options
@click.option(
    "--system",
    "system_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="An exported system (mtcore export) instead of RECIPE and its workdir.",
)
@WORKDIR
@DIRECTION
@STAGE
@click.option(
    "--input",
    "-i",
    "input_path",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default="-",
    help="Lines to translate (default: stdin).",
)
@click.option(
    "--output",
    "-o",
    "output_path",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default="-",
    help="Where the translations go, one line per input line (default: stdout).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default=None,
    help="Decode on this device (default: what the recipe's steps say).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Repair invalid UTF-8 (U+FFFD) and NUL bytes instead of stopping at the line.",
)
@click.option(
    "--list-stages",
    is_flag=True,
    help="List the stages and directions (marking the submitted ones and the recipe's notes), "
    "then stop.",
)
def translate(
    recipe: Path | None,
    profile: str | None,
    sets: tuple[str, ...],
    system_dir: Path | None,
    workdir: Path | None,
    direction: str | None,
    stage: str | None,
    input_path: Path,
    output_path: Path,
    device: str | None,
    repair: bool,
    list_stages: bool,
) -> None:
    """Translate new text with a stage of a finished run: the same steps the run takes from its
    test set to that stage's evaluated output (preprocessing, models or ensemble, n-best
    reranking with the tuned weights, post-processing), one output line per input line."""
    from mtcore.recipe.stages import stage_mark
    from mtcore.system.inference import Translator, build_hint, stages

    progress = sys.stderr.isatty()
    if system_dir is not None:
        from mtcore.contracts.registry import load_registry
        from mtcore.recipe.hashing import private_conversions
        from mtcore.system.export import load_system

        if recipe is not None or workdir is not None:
            raise MtcoreError("--system replaces RECIPE and --workdir; give one or the other")
        with private_conversions():  # someone else's models never enter the user's cache
            system = load_system(system_dir, load_registry(), device, progress)
            _translate(system, input_path, output_path, repair)
        return
    if recipe is None:
        raise MtcoreError("give RECIPE (and --workdir), or --system DIR")
    registry, loaded, _ = load(recipe, profile, sets)
    if list_stages:
        head = loaded.head
        for found in stages(loaded):
            mark = stage_mark(
                head.submitted, head.stage_notes, loaded.steps, found.name, found.direction
            )
            line = f"{found.direction}\t{found.name}\t(scored by {found.evaluate})"
            click.echo(line + (f"\t{mark}" if mark else ""))
        return
    where = default_workdir(loaded, workdir)
    system = Translator.from_run(loaded, registry, where, direction, stage, device, progress,
                                 build_hint=build_hint(recipe, profile, where))  # fmt: skip
    _translate(system, input_path, output_path, repair)


def _translate(system: Translator, input_path: Path, output_path: Path, repair: bool) -> None:
    """``input_path`` (or ``-``, standard input) through ``system`` into ``output_path``."""
    from mtcore.system.inference import REPAIR, STRICT_KEEP

    policy = REPAIR if repair else STRICT_KEEP
    if str(input_path) == "-":
        with tempfile.TemporaryDirectory(prefix="mtcore-stdin-") as name:
            saved = Path(name) / "stdin"
            with open(saved, "wb") as handle:
                shutil.copyfileobj(sys.stdin.buffer, handle)
            hyps, stats = system.translate_file(saved, policy, shown="<stdin>")
    else:
        hyps, stats = system.translate_file(input_path, policy)
    for rule, count in stats.as_dict().items():
        click.echo(f"input: {rule} {count} (repaired)", err=True)
    text = "".join(line + "\n" for line in hyps).encode("utf-8")
    if str(output_path) == "-":
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    else:
        output_path.write_bytes(text)


MODEL_FORMATS = {"ctranslate2": "int8", "huggingface": "float32"}
"""The formats ``export --format`` writes a stage's model in, with their default quantization."""


@click.command()
@recipe_options
@WORKDIR
@DIRECTION
@STAGE
@click.option(
    "--output",
    "-o",
    "folder",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A new directory for the system.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mtcore", *MODEL_FORMATS]),
    default="mtcore",
    show_default=True,
    help="mtcore: the whole stage, for mtcore translate --system; ctranslate2: the stage's "
    "model as a directory CTranslate2's Translator loads, its tokenizer beside it; "
    "huggingface: the stage's model as a directory transformers' AutoModelForSeq2SeqLM loads.",
)
@click.option(
    "--quantization",
    default=None,
    help="The weights' type. ctranslate2: int8 (the default), int8_float16, float16, bfloat16, "
    "float32, ...; huggingface: float32 (the default), float16 or bfloat16.",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0.0, 100.0),
    default=1.0,
    show_default=True,
    help="ctranslate2, huggingface: the most BLEU the quantized model may lose against the "
    "unquantized one on the stage's test set; over it nothing is written.",
)
@click.option(
    "--allow-mismatch",
    is_flag=True,
    help="ctranslate2, huggingface: write a float32 export whose own client reproduces fewer "
    "than 99% of the run's lines of the stage's decoding step (the share is recorded).",
)
def export(
    recipe: Path,
    profile: str | None,
    sets: tuple[str, ...],
    workdir: Path | None,
    direction: str | None,
    stage: str | None,
    folder: Path,
    fmt: str,
    quantization: str | None,
    tolerance: float,
    allow_mismatch: bool,
) -> None:
    """Write a stage of a finished run as a self-contained directory (models, vocabularies,
    SentencePiece and truecase models, rerank weights and feature models, post-processing
    settings, scores) for mtcore translate --system DIR; or, with --format ctranslate2 or
    huggingface, its model for CTranslate2 or transformers, with the BLEU the quantization
    costs measured."""
    from mtcore.system.export import export_system
    from mtcore.system.inference import Translator, build_hint
    from mtcore.system.model_export import export_model_format

    registry, loaded, _ = load(recipe, profile, sets)
    where = default_workdir(loaded, workdir)
    hint = build_hint(recipe, profile, where)
    system = Translator.from_run(loaded, registry, where, direction, stage, build_hint=hint)
    if fmt != "mtcore":
        quantization = quantization or MODEL_FORMATS[fmt]
        made = export_model_format(
            loaded,
            registry,
            system,
            where,
            folder,
            fmt,
            quantization,
            tolerance,
            allow_mismatch,
        )
        check = made["quantization_check"]
        left = ", ".join(step["id"] for step in made["not_included"]) or "none"
        click.echo(
            f"{folder}: {fmt} model of step {made['step']} ({quantization}); BLEU on the "
            f"stage's test set {check['exported']:.2f}, unquantized {check['unquantized']:.2f}; "
            f"identical to the run's step: {made['run_check']['identical_to_run']:.1%}; "
            f"steps of the stage not in this format: {left}"
        )
        return
    info = export_system(loaded, registry, system, where, folder)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    click.echo(
        f"{folder}: stage {system.stage.name} ({system.stage.direction}), "
        f"{len(info['steps'])} steps, {size / 1e6:.1f} MB"
    )

"""``mtcore export --format``: the model of a stage's decoding step written for another tool
(CTranslate2, transformers), checked through that tool's own API against what the run produced,
with the steps of the stage's path before and after the model stated for its users."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from mtcore import __version__
from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.registry import Registry
from mtcore.contracts.step import Artifact, ModelExport, config_dict
from mtcore.recipe.load import Recipe
from mtcore.recipe.plan import make_plan, step_dir
from mtcore.run.cache import read_manifest
from mtcore.system.inference import Replay, Translator

EXPORT_FILE = "mtcore_export.json"


def export_model_format(
    recipe: Recipe, registry: Registry, system: Translator, workdir: Path, folder: Path,
    fmt: str, quantization: str, tolerance: float, allow_mismatch: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The model of the stage's decoding step written for another tool into the new directory
    ``folder`` (``mtcore export --format``), with ``mtcore_export.json``. The written model and
    the same model unquantized both translate the stage's test set as the run fed it to that
    step, through the other tool's own API (:class:`ModelExport`'s ``decode``), and the
    written model's lines are compared with that step's own output in the run. Nothing is
    written when quantization costs more than ``tolerance`` BLEU against the stage's
    references, or when a float32 export reproduces fewer than :data:`FLOAT32_IDENTICAL` of
    the run's lines and ``allow_mismatch`` is not given; the error gives the figures. The
    steps of the stage's path before and after the model are stated (:func:`path_statement`)
    so that a user can redo them."""
    if folder.exists() and any(folder.iterdir()):
        raise MtcoreError(f"{folder} exists and is not empty; give a new directory")
    decoders = [r for r in system.replays if fmt in type(r.plugin).export_formats]
    if len(decoders) != 1:
        kinds = sorted({r.kind for r in system.replays})
        raise MtcoreError(
            f"stage {system.stage.name!r}: {len(decoders)} steps of its path ({', '.join(kinds)}) "
            f"write their model as {fmt}; the format holds one"
        )
    replay = decoders[0]
    test = system.test
    if test is None:
        raise MtcoreError("export --format needs the finished run (its test set), not a system")
    inputs = {
        role: Artifact.open(Path(what))
        for role, (where, what) in replay.inputs.items()
        if where == "artifact"
    }
    partial = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        try:
            made = replay.plugin.export_model(inputs, fmt, partial, quantization, registry)
        except MtcoreError as exc:  # name the stage's step, not the plugin's placeholder
            message = str(exc).removeprefix("export: ")
            raise MtcoreError(
                f"stage {system.stage.name!r}, step {replay.id!r}: {message}"
            ) from exc
        sources = _fed(test, replay, workdir, make_plan(recipe, registry), made.src)
        if made.tgt not in test.langs:
            raise MtcoreError(f"{test.path}: no {made.tgt!r} references (has {test.langs})")
        references = [pair[test.langs.index(made.tgt)] for pair in test]
        run = _run_lines(replay, workdir, make_plan(recipe, registry), made.tgt, len(sources))
        check = _quantization_check(registry, made, sources, references, made.tgt, quantization)
        against = run_check(check.pop("exported_lines"), run, quantization, allow_mismatch)
        if check["loss"] > tolerance:
            raise MtcoreError(
                f"{fmt} export refused: {quantization} scores {check['exported']:.2f} BLEU on "
                f"the stage's test set ({len(sources)} lines), the unquantized model "
                f"{check['unquantized']:.2f}: a loss of {check['loss']:.2f}, over the tolerance "
                f"{tolerance} (export with --quantization float32 or float16, or raise "
                "--tolerance)"
            )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    info = _record(made, recipe, registry, system, replay, workdir, partial, against, check)
    if made.finish is not None:
        made.finish(partial, info)
    (partial / EXPORT_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():
        folder.rmdir()  # empty, checked above
    os.rename(partial, folder)
    return info


def _record(
    made: ModelExport, recipe: Recipe, registry: Registry, system: Translator, replay: Replay,
    workdir: Path, partial: Path, against: dict[str, Any], check: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """What ``mtcore_export.json`` records of an export that passed its checks."""
    return {
        **made.info,
        "mtcore": __version__,
        "recipe": recipe.name,
        "profile": recipe.profile,
        "stage": system.stage.name,
        "step": replay.id,
        "run_check": against,
        "quantization_check": check,
        "not_included": [
            {"id": r.id, "kind": r.kind} for r in system.replays if r is not replay
        ],  # fmt: skip
        "path": path_statement(system, replay, partial),
        "test_set": system.corpus_name,
        "scores": read_manifest(
            step_dir(workdir, {p.id: p for p in make_plan(recipe, registry)}[system.stage.evaluate])
        ).get("metrics", {}),
    }


def _fed(test: Any, replay: Replay, workdir: Path, plan: list[Any], src: str) -> list[str]:
    """The source lines the run gave ``replay``'s step: the stage's test set, or the output
    of the step before it on the path (a normalizer, a truecaser)."""
    from mtcore.data.corpus import Corpus

    where, what = replay.inputs[type(replay.plugin).streams[0]]
    if where == "test":
        corpus = test
    else:
        step, output = what.split("/", 1)
        corpus = Corpus.open(step_dir(workdir, {p.id: p for p in plan}[step]) / output)
    if src not in corpus.langs:
        raise MtcoreError(f"{corpus.path}: no {src!r} column to translate (has {corpus.langs})")
    return [pair[corpus.langs.index(src)] for pair in corpus]


def _quantization_check(
    registry: Registry, made: ModelExport, sources: list[str], references: list[str],
    tgt: str, quantization: str,
) -> dict[str, Any]:  # fmt: skip
    from mtcore.system.metrics import build_metrics

    bleu = build_metrics(registry, ["bleu"])[0]
    exported = made.decode(sources, True)
    unquantized = exported if quantization == "float32" else made.decode(sources, False)
    before = bleu.corpus_score(unquantized, [references], tgt)
    after = bleu.corpus_score(exported, [references], tgt)
    same = sum(a == b for a, b in zip(unquantized, exported, strict=True))
    return {
        "quantization": quantization,
        "signature": before.signature,
        "unquantized": round(before.score, 2),
        "exported": round(after.score, 2),
        "loss": round(before.score - after.score, 2),
        "lines": len(sources),
        "identical_outputs": round(same / max(len(sources), 1), 4),
        "exported_lines": exported,
    }


FLOAT32_IDENTICAL = 0.99
"""The share of the run's lines a float32 export must reproduce. A float32 model decoded by
another engine with the same search differs from the run only where two hypotheses score
within float rounding of each other: on NT5's cpu-profile stages without n-gram blocking,
CTranslate2 and fairseq agree on all but length-capped lines. Below it the search or the
model differs, and the export says so instead of recording it."""


def run_check(
    exported: list[str], run: list[str], quantization: str, allow_mismatch: bool
) -> dict[str, Any]:
    """The written model's lines (the format's own API) against the decoding step's output in
    the run: the identical share, the first lines that differ; a float32 export under
    :data:`FLOAT32_IDENTICAL` is an error unless ``allow_mismatch``."""
    differ = [i for i, (a, b) in enumerate(zip(exported, run, strict=True)) if a != b]
    share = round(1 - len(differ) / max(len(run), 1), 4)
    check = {"lines": len(run), "identical_to_run": share, "differing_lines": differ[:20],
             "float32_threshold": FLOAT32_IDENTICAL}  # fmt: skip
    if quantization == "float32" and share < FLOAT32_IDENTICAL and not allow_mismatch:
        first = differ[0]
        raise MtcoreError(
            f"float32 export refused: its own client reproduces {share:.1%} of the run's "
            f"{len(run)} lines, under {FLOAT32_IDENTICAL:.0%} (beyond float noise: the search "
            f"or the model differs); line {first + 1}: run {run[first][:80]!r}, export "
            f"{exported[first][:80]!r} (give --allow-mismatch to write it with the share "
            "recorded)"
        )
    return check


def _run_lines(replay: Replay, workdir: Path, plan: list[Any], tgt: str, count: int) -> list[str]:
    """The decoding step's own output in the run (its first output, the ``tgt`` column)."""
    from mtcore.data.corpus import Corpus

    planned = {p.id: p for p in plan}[replay.id]
    corpus = Corpus.open(step_dir(workdir, planned) / type(replay.plugin).outputs[0])
    if tgt not in corpus.langs:
        raise MtcoreError(f"{corpus.path}: no {tgt!r} column (has {corpus.langs})")
    lines = [pair[corpus.langs.index(tgt)] for pair in corpus]
    if len(lines) != count:
        raise MtcoreError(f"{corpus.path}: {len(lines)} lines for {count} sources")
    return lines


def path_statement(system: Translator, replay: Replay, folder: Path) -> dict[str, Any]:
    """The stage's steps before (``before``) and after (``after``) the exported model, in
    order: kind, settings and each step's own statement (:meth:`Step.export_statement`: files
    it writes into ``folder``, the tool call that redoes it)."""
    at = system.replays.index(replay)
    out: dict[str, Any] = {"before": [], "after": []}
    for index, other in enumerate(system.replays):
        if other is replay:
            continue
        inputs = {
            role: Artifact.open(Path(what))
            for role, (where, what) in other.inputs.items()
            if where == "artifact"
        }
        entry = {"id": other.id, "kind": other.kind, "config": config_dict(other.plugin.config)}
        entry.update(other.plugin.export_statement(inputs, folder))
        out["before" if index < at else "after"].append(entry)
    return out

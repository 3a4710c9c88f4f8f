"""Chooses ensemble members at run time: the ``top`` of up to 16 candidate models by a metric on a
development set (Xiaomi §3.3: "We select the top 4 systems with the highest BLEU evaluated on the
development dataset from all the available baseline systems of each direction for models
ensembling").

Each candidate translates the source column of ``dev`` alone, with the translate step's own
beam search (:class:`~mtcore_plugins.common.decoding.translator.Translator`), and is scored against
the target column with a metric plugin, as the evaluate step scores. The chosen models are the
outputs ``model``, ``model2``, ... best first: each is the candidate's artifact as it is (its files
linked, not copied), so a translate step, a rerank feature or ``mtcore export`` reads it like any
trained model. ``ranking`` holds every candidate's score. Ties go to the earlier input, so the
choice is deterministic; a single candidate is chosen without decoding. A candidate's score is kept
in the step's scratch as soon as it is known: a killed run resumes with the candidates not yet
scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from mtcore.api import (
    NOT_IDENTITY,
    Artifact,
    Corpus,
    DataError,
    Metric,
    PluginConfig,
    Step,
    StepContext,
    components,
    write_artifact_meta,
)
from mtcore.api.engine import build_metrics, same_file
from mtcore_plugins.common.decoding.translator import MODEL_ROLES, DecodeJob, check_model

CANDIDATE_ROLES = ("model", *(f"model{i}" for i in range(2, 17)))
RANKING_FILE = "ranking.json"


class SelectModelsConfig(PluginConfig):
    src: str = Field(min_length=1, max_length=32, description="source language (dev column)")
    tgt: str = Field(min_length=1, max_length=32, description="target language (dev reference)")
    top: int = Field(
        ge=1,
        le=len(MODEL_ROLES),
        description="how many candidates to keep, best first, as outputs model, model2, ... "
        "(at most the candidates connected)",
    )
    metric: str | dict[str, Any] = Field(
        "bleu",
        description="metric plugin name or {name, settings} the candidates are ranked by "
        "(its higher_is_better decides the order)",
        json_schema_extra=components("metrics"),
    )
    beam: int = Field(5, ge=1, le=256, description="beam size of the dev translations")
    lenpen: float = Field(1.0, ge=0.0, le=10.0, description="length penalty (>1 favours longer)")
    max_len_a: float = Field(1.5, ge=0.0, le=100.0, description="output length limit a*src + b")
    max_len_b: int = Field(10, ge=1, le=10_000, description="output length limit (b)")
    batch_size: int = Field(64, ge=1, le=100_000, description="sentences per batch")
    max_tokens: int | None = Field(None, ge=16, le=1_000_000, description="tokens per batch")
    threads: int = Field(
        0,
        ge=0,
        le=512,
        description="torch CPU threads; 0: torch's default",
        json_schema_extra=NOT_IDENTITY,
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where the candidates decode: auto takes the GPU when torch sees one",
        json_schema_extra=NOT_IDENTITY,
    )
    models: list[str] = Field(
        ["transformer_presets"],
        max_length=32,
        description="mtcore.models plugins to register before loading (each model's own are added)",
        json_schema_extra=components("models"),
    )

    @model_validator(mode="after")
    def _check(self) -> SelectModelsConfig:
        if self.src == self.tgt:
            raise ValueError(f"src and tgt are both {self.src!r}")
        return self


class SelectModelsStep(Step[SelectModelsConfig]):
    """Outputs ``model`` ... ``model<top>``: the best candidates on ``dev``, best first, each a
    fairseq model artifact; ``ranking``: every candidate's score (``ranking.json``). Every
    candidate must translate src->tgt; they may differ in architecture, reading direction and
    dictionary (a translate step that ensembles the chosen ones checks that they agree)."""

    name = "select_models"
    inputs: ClassVar[dict[str, bool]] = {
        "model": True,
        **{role: False for role in CANDIDATE_ROLES[1:]},
        "dev": True,
        "spm": True,
    }
    outputs: ClassVar[tuple[str, ...]] = (*MODEL_ROLES, "ranking")

    def written_outputs(self) -> tuple[str, ...]:
        return (*MODEL_ROLES[: self.config.top], "ranking")

    def run(self, ctx: StepContext) -> None:
        config = self.config
        candidates = {r: a for r, a in ctx.inputs.items() if r in CANDIDATE_ROLES}
        if config.top > len(candidates):
            raise DataError(
                f"{ctx.step_id}: top {config.top} but {len(candidates)} candidate(s) connected "
                f"({', '.join(candidates)}): connect more models or lower top"
            )
        for role, artifact in candidates.items():
            where = f"{ctx.step_id}: input {role} ({artifact.path})"
            check_model(where, artifact.meta, config.src, config.tgt)
        dev = Corpus.open(ctx.inputs["dev"].path)
        for lang in (config.src, config.tgt):
            if lang not in dev.langs:
                raise DataError(
                    f"{ctx.step_id}: dev corpus {dev.path} has languages {list(dev.langs)}, "
                    f"not {lang!r}"
                )
        pairs = list(dev)
        sources = [pair[dev.langs.index(config.src)] for pair in pairs]
        refs = [pair[dev.langs.index(config.tgt)] for pair in pairs]
        metric = build_metrics(ctx.registry, [config.metric])[0]
        done = ctx.scratch("scores")
        ranking: list[dict[str, Any]] = []
        for index, (role, artifact) in enumerate(candidates.items()):
            if len(candidates) == 1:  # nothing to rank: no decoding
                found = {"metric": "", "score": 0.0, "signature": "", "ranked": False}
            else:
                found = score_candidate(ctx, config, metric, role, artifact, sources, refs, done)
            # the step's directory and output, not an absolute path: the same in any workdir
            step = f"{artifact.path.parent.name}/{artifact.path.name}"
            ranking.append({"role": role, "step": step, "index": index, **found})
        higher = getattr(metric, "higher_is_better", True)
        ranking.sort(key=lambda row: (-row["score"] if higher else row["score"], row["index"]))
        for rank, row in enumerate(ranking, 1):
            row["rank"] = rank
            row["selected"] = rank <= config.top
        for out_role, row in zip(MODEL_ROLES, ranking[: config.top], strict=False):
            link_artifact(candidates[row["role"]].path, ctx.output(out_role))
            ctx.log.info(
                "%s: %s is %s (%s)",
                ctx.step_id, out_role, row["role"],
                "the only candidate" if row.get("ranked") is False
                else f"{row['metric']} {row['score']:.2f} on {len(refs)} dev lines",
            )  # fmt: skip
        out = ctx.output("ranking")
        payload = {"dev_lines": len(refs), "top": config.top, "ranking": ranking}
        (out / RANKING_FILE).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        write_artifact_meta(out, type="model-ranking", src=config.src, tgt=config.tgt)
        ctx.metrics["ranking"] = [
            {k: row[k] for k in ("rank", "role", "score", "selected")} for row in ranking
        ]
        ctx.metrics["signature"] = ranking[0]["signature"] if ranking else ""
        ctx.stats.add("select_models.candidates", len(ranking))
        ctx.stats.add("select_models.dev_lines", len(refs))


def score_candidate(
    ctx: StepContext,
    config: SelectModelsConfig,
    metric: Metric,
    role: str,
    artifact: Artifact,
    sources: list[str],
    refs: list[str],
    done: Path,
) -> dict[str, Any]:
    """The candidate's score on dev: remembered in ``done`` from an earlier attempt of this
    step, or translated and scored now (and remembered)."""
    saved = done / f"{role}.json"
    if saved.exists():
        return dict(json.loads(saved.read_text(encoding="utf-8")))
    hyps = translate_dev(ctx, config, artifact, sources)
    score = metric.corpus_score(hyps, [refs], config.tgt)
    found = {"metric": score.metric, "score": score.score, "signature": score.signature}
    partial = saved.with_suffix(".tmp")
    partial.write_text(json.dumps(found) + "\n", encoding="utf-8")
    partial.replace(saved)
    return found


def translate_dev(
    ctx: StepContext, config: SelectModelsConfig, artifact: Artifact, sources: list[str]
) -> list[str]:
    """The candidate's 1-best translations of the dev sources, alone, in the translate step's
    beam search."""
    import torch

    from mtcore_plugins.common.decoding.translator import Translator
    from mtcore_plugins.steps._translate_config import TranslateConfig

    settings = config.model_dump(
        include={
            "src", "tgt", "beam", "lenpen", "max_len_a", "max_len_b", "batch_size",
            "max_tokens", "device", "models",
        }
    )  # fmt: skip
    job = DecodeJob(
        ctx.step_id, {"model": artifact, "spm": ctx.inputs["spm"]}, registry=ctx.registry
    )
    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        translator = Translator(TranslateConfig(**settings), job)
        hyps = translator.translate(sources)
    finally:
        torch.set_num_threads(threads)
    ctx.stats.merge(job.stats.as_dict())
    return hyps


def link_artifact(source: Path, target: Path) -> None:
    """``target`` holds every file of the artifact ``source`` (linked or cloned, else copied)."""
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if path.is_dir():
            (target / rel).mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            same_file(path, target / rel)

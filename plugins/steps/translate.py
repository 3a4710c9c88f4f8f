"""Translates the source side of a corpus with a fairseq checkpoint, or an ensemble of several
sharing one dictionary, in input order: beam search or sampling, the 1-best as a corpus and, with
``nbest``, an n-best list as JSON lines. Right-to-left models (train ``direction: r2l``) have
their output put back in reading order.

The corpus is cut into shards of ``chunk_lines`` lines translated on the executor's workers
(each loads the models once); a shard's result is saved as soon as it is done, so a killed run
resumes without translating finished shards again.

``backend`` picks the decoder: fairseq (the default), or CTranslate2 on the checkpoint
converted once (``ct2_convert``), with ``compute_type`` such as int8; ``auto`` falls back to
fairseq, saying why, for what does not convert (ensembles, B2T, DLCL, adapters, Evolved).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from mtcore.api import (
    HASHED_WHEN_SET,
    NOT_IDENTITY,
    Artifact,
    Corpus,
    CorpusWriter,
    DataError,
    Executor,
    PluginConfig,
    Stats,
    Step,
    StepContext,
    StepError,
    components,
    ignored_when,
    map_shards,
    worker_forget,
    worker_memo,
)
from mtcore_plugins.common.ct2_decoding import Ct2Translator
from mtcore_plugins.common.decoding import (
    MODEL_ROLES,
    DecodeJob,
    Hyp,
    Translator,
    check_members,
    weigh_models,
)
from mtcore_plugins.common.nbest import NBestWriter

__all__ = ["MODEL_ROLES", "TranslateConfig", "TranslateStep", "Translator", "check_members"]
__all__ += ["weigh_models"]


class TranslateConfig(PluginConfig):
    src: str = Field(min_length=1, max_length=32, description="source language (corpus column)")
    tgt: str = Field(min_length=1, max_length=32, description="target language of the output")
    beam: int = Field(5, ge=1, le=256, description="beam size")
    lenpen: float = Field(1.0, ge=0.0, le=10.0, description="length penalty (>1 favours longer)")
    max_len_a: float = Field(
        1.5, ge=0.0, le=100.0, description="output length limit a*source_tokens + b (a)"
    )
    max_len_b: int = Field(10, ge=1, le=10_000, description="output length limit (b)")
    nbest: int = Field(
        0,
        ge=0,
        le=256,
        description="hypotheses per line written to the n-best output (JSON lines); 0 writes "
        "none. Beam search: at most `beam`; sampling: the number of samples drawn",
    )
    sampling: bool = Field(
        False,
        description="sample instead of beam search (HW-TSC §5.5 sampling back-translation; "
        "Edunov et al. 2018): one sample per line, or `nbest` samples",
    )
    sampling_topk: int = Field(
        -1, ge=-1, le=100_000, description="sample from the k most likely tokens; -1: all"
    )
    sampling_topp: float = Field(
        -1.0, ge=-1.0, le=1.0, description="nucleus sampling mass (0-1]; -1: off"
    )
    temperature: float = Field(
        1.0, gt=0.0, le=100.0, description="divides the logits before sampling or search"
    )
    no_repeat_ngram_size: int = Field(
        0,
        ge=0,
        le=100,
        description="no n-gram of this many target pieces occurs twice in a hypothesis "
        "(fairseq-generate's --no-repeat-ngram-size, CTranslate2's no_repeat_ngram_size; "
        "CTranslate2 blocks before its softmax, fairseq after, so their outputs differ); 0: off",
        json_schema_extra=HASHED_WHEN_SET,
    )
    seed: int = Field(1, ge=0, le=2**31 - 1, description="sampling seed (per shard: seed + shard)")
    batch_size: int = Field(64, ge=1, le=100_000, description="sentences per batch")
    max_tokens: int | None = Field(
        None, ge=16, le=1_000_000, description="source tokens per batch, when set"
    )
    chunk_lines: int = Field(
        2000,
        ge=1,
        le=1_000_000,
        description="lines per shard: read, sorted by length, translated and saved at a time",
    )
    threads: int = Field(
        0,
        ge=0,
        le=512,
        description="torch CPU threads per worker; 0: torch's default with one worker, the "
        "cores shared out between several",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where the models run: auto takes the GPU when torch sees one (a Ray "
        "worker with gpus_per_worker, a GPU machine), else the CPU",
        json_schema_extra=NOT_IDENTITY,
    )
    models: list[str] = Field(
        ["transformer_presets"],
        max_length=32,
        description="mtcore.models plugins to register before loading (each model's own are added)",
        json_schema_extra=components("models"),
    )
    backend: Literal["fairseq", "ctranslate2", "auto"] = Field(
        "fairseq",
        description="decoder: fairseq's own search; ctranslate2, the checkpoint converted once "
        "(cached by its hash) and decoded by CTranslate2, an error when it cannot be; auto, "
        "CTranslate2 when the model converts, else fairseq with the reason logged (ensembles "
        "always fall back). docs/decoding.md",
        json_schema_extra=HASHED_WHEN_SET,  # added later: the steps of earlier runs stay cached
    )
    compute_type: Literal[
        "default", "auto", "float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
        "int16", "float16", "bfloat16",
    ] = Field(
        "default",
        description="CTranslate2 weights and arithmetic (default: as converted, float32); "
        "int8 quantizes on load. Ignored by the fairseq backend",
        json_schema_extra=ignored_when(backend="fairseq"),
    )  # fmt: skip
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="ensemble weight per model input (model, model2, ...); unnamed ones weigh "
        "1. The ensemble averages the models' next-token probabilities with the weights "
        "normalised to sum to 1",
    )

    @field_validator("weights")
    @classmethod
    def _weight_roles(cls, value: dict[str, float]) -> dict[str, float]:
        for role, weight in value.items():
            if role not in MODEL_ROLES:
                raise ValueError(f"{role!r} is not a model input (valid: {', '.join(MODEL_ROLES)})")
            if not 0.0 < weight <= 1000.0:
                raise ValueError(f"weight of {role!r} must be > 0 and <= 1000, not {weight}")
        return value

    @model_validator(mode="after")
    def _search(self) -> TranslateConfig:
        if not self.sampling and self.nbest > self.beam:
            raise ValueError(
                f"nbest {self.nbest} is more than beam {self.beam}: beam search keeps `beam` "
                "hypotheses (raise beam, or set sampling: true)"
            )
        if not self.sampling and (self.sampling_topk != -1 or self.sampling_topp != -1.0):
            raise ValueError("sampling_topk and sampling_topp need sampling: true")
        if self.sampling_topp == 0.0:
            raise ValueError("sampling_topp must be in (0, 1], or -1 for off")
        return self


Shard = tuple[int, int, list[str]]
"""(shard number, index of its first line, its source lines)."""

ShardResult = tuple[list[str], list[list[Hyp]] | None, dict[str, int]]
"""1-best lines, n-best lists (when asked for) and counters of one shard."""


class TranslateStep(Step[TranslateConfig]):
    """One output line per input line (``hyp``), in input order, and with ``nbest`` one n-best
    entry per line (``nbest``): empty input gives empty output, and a source longer than the
    model's positions is truncated (``translate.truncated``). Inputs ``model2`` ...
    ``model8`` make an ensemble with ``model`` (NT5 §4.4: architectures may differ;
    dictionaries, languages and direction must not)."""

    name = "translate"
    inputs: ClassVar[dict[str, bool]] = {
        "model": True,
        "corpus": True,
        "spm": True,
        **{role: False for role in MODEL_ROLES[1:]},
    }
    outputs: ClassVar[tuple[str, ...]] = ("hyp", "nbest")
    streams: ClassVar[tuple[str, ...]] = ("corpus",)

    def written_outputs(self) -> tuple[str, ...]:
        """No n-best list without ``nbest``: a reader of one is a validation error."""
        return self.outputs if self.config.nbest else ("hyp",)

    def run(self, ctx: StepContext) -> None:
        import torch

        corpus = Corpus.open(ctx.inputs["corpus"].path)
        if self.config.src not in corpus.langs:
            raise DataError(
                f"{ctx.step_id}: corpus {corpus.path} has languages "
                f"{list(corpus.langs)}, not the source {self.config.src!r}"
            )
        members = {r: a for r, a in ctx.inputs.items() if r in MODEL_ROLES}
        # Checked here, before any worker starts, so that a wrong model is one clear error.
        check_members(self.config.src, self.config.tgt, self.config.weights, ctx.step_id, members)
        threads = torch.get_num_threads()
        ct2 = ct2_model(self.config, members, ctx)
        try:
            self._translate(ctx, corpus, corpus.langs.index(self.config.src), ct2)
        finally:
            torch.set_num_threads(threads)
            worker_forget("translator")  # an in-process translator: free the models with the step

    def _translate(self, ctx: StepContext, corpus: Corpus, column: int, ct2: str) -> None:
        config = self.config
        started = time.time()
        models = {r: a for r, a in ctx.inputs.items() if r in (*MODEL_ROLES, "spm")}
        job = DecodeJob(ctx.step_id, models)
        settings = (config.model_dump_json(), worker_threads(config.threads, ctx.executor), ct2)
        submitted = []

        def task(shard: Shard) -> tuple[Any, ...]:
            submitted.append(shard[0])
            return (*settings, job, shard)

        writer = CorpusWriter(ctx.output("hyp"), (config.tgt,), name="hyp")
        nbest = NBestWriter(ctx.output("nbest"), config.src, config.tgt) if config.nbest else None
        inputs = 0
        with writer, ctx.progress(corpus.count(), "translate") as bar:
            shards = map_shards(
                ctx.executor, translate_shard, read_shards(corpus, column, config.chunk_lines),
                task, ctx.scratch("shards"),
            )  # fmt: skip
            for (_, first, lines), (hyps, lists, counts) in shards:
                if len(hyps) != len(lines) or (
                    nbest is not None and len(lists or ()) != len(lines)
                ):
                    raise StepError(
                        f"{ctx.step_id}: {len(hyps)} outputs for {len(lines)} inputs "
                        f"(lines {first + 1}-{first + len(lines)} of {corpus.file(config.src)})"
                    )
                for text in hyps:
                    writer.write((text,))
                # Empty sources always give empty outputs (translate.empty); an empty output
                # of a non-empty source is the model's (a toy or broken model's typical sign).
                blank = sum(1 for text in hyps if not text.strip())
                ctx.stats.add("translate.empty_output", blank - counts.get("translate.empty", 0))
                if nbest is not None and lists is not None:
                    nbest.write_many(first, lines, lists)
                ctx.stats.merge(counts)
                inputs += len(lines)
                bar.update(len(lines))
        if nbest is not None:
            nbest.close(n=config.nbest, sampling=config.sampling)
        if writer.lines != inputs:
            raise StepError(f"{ctx.step_id}: wrote {writer.lines} lines for {inputs} inputs")
        seconds = time.time() - started
        ctx.stats.add("translate.lines", inputs)
        ctx.metrics["sentences_per_second"] = round(inputs / max(seconds, 1e-9), 2)
        ctx.metrics["seconds"] = round(seconds, 1)
        ctx.metrics["shards_translated"] = len(submitted)


def read_shards(corpus: Corpus, column: int, size: int) -> Iterator[Shard]:
    """The source column in shards of ``size`` lines."""
    lines: list[str] = []
    number = first = 0
    for index, pair in enumerate(corpus):
        lines.append(pair[column])
        if len(lines) == size:
            yield number, first, lines
            number, first, lines = number + 1, index + 1, []
    if lines:
        yield number, first, lines


def worker_threads(threads: int, executor: Any) -> int:
    """torch threads per worker: the setting, or the cores shared out between several workers
    (0: torch's default, when the executor runs one task at a time)."""
    if threads:
        return threads
    workers = executor.workers if isinstance(executor, Executor) else 1
    return max(1, (os.cpu_count() or 1) // workers) if workers > 1 else 0


def ct2_model(config: TranslateConfig, members: dict[str, Artifact], ctx: StepContext) -> str:
    """The converted model to decode with (cached, converted here once before any shard), or
    "" for fairseq: per ``backend``, with the reason logged when auto falls back."""
    if config.backend == "fairseq":
        return ""
    from mtcore_plugins.common.ct2_decoding import obstacles

    reasons = obstacles(config, members, ctx.registry)
    if reasons:
        why = "; ".join(reasons)
        if config.backend == "ctranslate2":
            raise DataError(f"{ctx.step_id}: backend ctranslate2 cannot decode: {why}")
        ctx.log.warning("%s: backend auto decodes with fairseq: %s", ctx.step_id, why)
        ctx.metrics["backend"] = "fairseq"
        return ""
    from mtcore_plugins.common.ct2_convert import converted

    path = converted(members["model"], config.src, config.tgt, config.models, ctx.registry)
    ctx.metrics["backend"] = "ctranslate2"
    return str(path)


def translate_shard(task: tuple[str, int, str, DecodeJob, Shard]) -> ShardResult:
    """Executor task: the 1-best (and n-best) translations of one shard, and its counters.
    ``ct2``: the converted model to decode with CTranslate2, or empty for fairseq."""
    import torch

    settings, threads, ct2, job, (number, _first, lines) = task
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    key = settings + ct2 + repr(sorted((r, str(a.path)) for r, a in job.inputs.items()))

    def load() -> Translator | Ct2Translator:
        config = TranslateConfig.model_validate_json(settings)
        return Ct2Translator(config, job, Path(ct2), threads) if ct2 else Translator(config, job)

    # loaded by the first shard, kept for the next ones; one translator per worker at a time
    translator: Translator | Ct2Translator = worker_memo(("translator", key), load, only=True)
    config = translator.config
    translator.ctx = DecodeJob(job.step_id, job.inputs)  # fresh counters for this shard
    if config.sampling:  # per shard: a resumed run draws what an uninterrupted one would
        torch.manual_seed(config.seed + number)
        translator.seed = config.seed + number
    if config.nbest:
        lists = translator.translate_nbest(lines, config.nbest)
        hyps = [found[0][0] for found in lists]
    else:
        lists, hyps = None, translator.translate(lines)
    stats: Stats = translator.ctx.stats
    return hyps, lists, stats.as_dict()

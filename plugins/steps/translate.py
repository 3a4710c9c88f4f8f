"""Translates the source side of a corpus with a fairseq checkpoint, or an ensemble of several
sharing one dictionary, in input order: beam search or sampling, the 1-best as a corpus and, with
``nbest``, an n-best list as JSON lines. Right-to-left models (train ``direction: r2l``) have
their output put back in reading order.

The corpus is cut into shards of ``chunk_lines`` lines translated on the executor's workers
(each loads the models once); a shard's result is saved as soon as it is done, so a killed run
resumes without translating finished shards again. Given a width (``resources:``, ``gpus: 8``
or a range the planner chooses in), the step runs as that many ranks, each translating every
N-th shard on a GPU of its own (:mod:`~mtcore_plugins.steps._translate_ranks`): the same shards,
assembled in the same order, so the same bytes at any width.

``backend`` picks the decoder: fairseq (the default), or CTranslate2 on the checkpoint
converted once (:mod:`~mtcore_plugins.common.ct2.convert`), with ``compute_type`` such as int8;
``auto`` falls back to fairseq, saying why, for what does not convert (ensembles, B2T, DLCL,
adapters, Evolved).

The ``model`` may also be a pretrained model of the recipe's ``models`` section (an OPUS-MT,
M2M-100 or NLLB teacher, :mod:`~mtcore_plugins.common.hub.pretrained`): it decodes with CTranslate2
whatever ``backend`` says, with its own tokenizer (no ``spm`` input) and, for a multilingual
model, the target language's token as the prefix.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from mtcore.api import (
    Artifact,
    Corpus,
    CorpusWriter,
    DataError,
    Step,
    StepContext,
    StepError,
    map_shards,
)
from mtcore.api.engine import ModelExport, Resources, thread_count, worker_forget
from mtcore_plugins.common.decoding.translator import (
    MODEL_ROLES,
    DecodeJob,
    Translator,
    check_members,
    weigh_models,
)
from mtcore_plugins.common.hub.pretrained import check_pretrained, converted_pretrained
from mtcore_plugins.steps._nbest import NBestWriter
from mtcore_plugins.steps._translate_config import TranslateConfig, worker_threads
from mtcore_plugins.steps._translate_ranks import RankJob, run_ranks
from mtcore_plugins.steps._translate_shards import (
    Shard,
    pretrained,
    read_shards,
    tagged,
    translate_shard,
)

__all__ = ["MODEL_ROLES", "TranslateConfig", "TranslateStep", "Translator", "check_members"]
__all__ += ["weigh_models"]


class TranslateStep(Step[TranslateConfig]):
    """One output line per input line (``hyp``), in input order, and with ``nbest`` one n-best
    entry per line (``nbest``): empty input gives empty output, and a source longer than the
    model's positions is truncated (``translate.truncated``). Inputs ``model2`` ...
    ``model16`` make an ensemble with ``model`` (NT5 §4.4: architectures may differ;
    dictionaries, languages and direction must not)."""

    parallel = True  # its shards go through ctx.executor
    widens_by_shards = True  # or through its ranks, at the width the scheduler gives it

    name = "translate"
    inputs: ClassVar[dict[str, bool]] = {
        "model": True,
        "corpus": True,
        "spm": False,  # required by a fairseq model; a pretrained one has its tokenizer
        **{role: False for role in MODEL_ROLES[1:]},
    }
    outputs: ClassVar[tuple[str, ...]] = ("hyp", "nbest")
    streams: ClassVar[tuple[str, ...]] = ("corpus",)
    export_formats: ClassVar[tuple[str, ...]] = ("ctranslate2", "huggingface")

    def resources(self) -> Resources:
        """Its ``threads``, at width 1; a width (``resources: {translate: {gpus: 8}}``) is a
        rank a GPU, each with those threads."""
        return Resources(cpus=thread_count(self.config.threads), distributed=True)

    def volume(self, lines_in: Mapping[str, float | None]) -> dict[str, float]:
        """One output line a source line, each decoded with the models."""
        known = lines_in.get("corpus")
        return {} if known is None else {"lines": known, "decode_lines": known}

    def export_model(
        self, inputs: dict[str, Artifact], fmt: str, out: Path, quantization: str, registry: Any
    ) -> ModelExport:
        """The model as a CTranslate2 directory (:mod:`~mtcore_plugins.steps._ct2_export`) or
        a transformers one (:mod:`~mtcore_plugins.steps._hf_export`)."""
        if fmt not in self.export_formats:
            raise DataError(f"translate exports {', '.join(self.export_formats)}, not {fmt!r}")
        members = {r: a for r, a in inputs.items() if r in MODEL_ROLES}
        if pretrained(members):
            check_pretrained_member(self.config, "export", members)
        else:
            c = self.config
            check_members(c.src, c.tgt, c.weights, "export", members, fmt == "ctranslate2")
        if fmt == "huggingface":
            from mtcore_plugins.steps._hf_export import export_huggingface

            return export_huggingface(self.config, "export", inputs, out, quantization, registry)
        from mtcore_plugins.steps._ct2_export import export_ctranslate2

        return export_ctranslate2(self.config, "export", inputs, out, quantization, registry)

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
        if pretrained(members):
            check_pretrained_member(self.config, ctx.step_id, members)
            ct2 = str(converted_pretrained(members["model"]))
            ctx.metrics["backend"] = "ctranslate2"
        else:
            check_members(
                self.config.src, self.config.tgt, self.config.weights, ctx.step_id, members, True
            )
            if tagged(members):
                ct2 = tagged_model(self.config, members, ctx)
            elif "spm" not in ctx.inputs:
                raise DataError(
                    f"{ctx.step_id}: input spm is not connected; a fairseq model needs the "
                    "SentencePiece model of its data (a pretrained model brings its tokenizer)"
                )
            else:
                ct2 = ct2_model(self.config, members, ctx)
        threads = torch.get_num_threads()
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

        store = ctx.scratch("shards")
        if ctx.ranks > 1:
            job_spec = RankJob(
                ctx.step_id, config.model_dump_json(), ct2,
                {r: str(a.path) for r, a in models.items()}, str(corpus.path), column,
                config.chunk_lines, str(store),
            )  # fmt: skip
            by_rank = run_ranks(ctx, job_spec, corpus.count(), config.threads)
            ctx.metrics["ranks"] = ctx.ranks
            ctx.metrics["shards_by_rank"] = [len(done) for done in by_rank]
        writer = CorpusWriter(ctx.output("hyp"), (config.tgt,), name="hyp")
        nbest = NBestWriter(ctx.output("nbest"), config.src, config.tgt) if config.nbest else None
        inputs = 0
        with writer, ctx.progress(corpus.count(), "translate") as bar:
            shards = map_shards(
                ctx.executor, translate_shard, read_shards(corpus, column, config.chunk_lines),
                task, store,
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
        ranked = sum(ctx.metrics.get("shards_by_rank", []))
        ctx.metrics["shards_translated"] = len(submitted) + ranked


def ct2_model(config: TranslateConfig, members: dict[str, Artifact], ctx: StepContext) -> str:
    """The converted model to decode with (cached, converted here once before any shard), or
    "" for fairseq: per ``backend``, with the reason logged when auto falls back."""
    if config.backend == "fairseq":
        return ""
    from mtcore_plugins.steps._ct2_decoding import obstacles

    reasons = obstacles(config, members, ctx.registry)
    if reasons:
        why = "; ".join(reasons)
        if config.backend == "ctranslate2":
            raise DataError(f"{ctx.step_id}: backend ctranslate2 cannot decode: {why}")
        ctx.log.warning("%s: backend auto decodes with fairseq: %s", ctx.step_id, why)
        ctx.metrics["backend"] = "fairseq"
        return ""
    from mtcore_plugins.common.ct2.convert import converted

    path = converted(members["model"], config.src, config.tgt, config.models, ctx.registry)
    ctx.metrics["backend"] = "ctranslate2"
    return str(path)


def tagged_model(config: TranslateConfig, members: dict[str, Artifact], ctx: StepContext) -> str:
    """The CTranslate2 model of a continued M2M-100/NLLB model (its language tokens are
    CTranslate2's prefix), or "" for fairseq where CTranslate2 cannot run it (an ensemble:
    HW-TSC §5.3's four Liv models) and ``backend`` is not ctranslate2. Every member must
    have been trained with the same language tokens."""
    from mtcore_plugins.common.ct2.convert import converted
    from mtcore_plugins.steps._ct2_decoding import obstacles

    model = members["model"]
    tokens = model.meta["language_tokens"]
    for side, given in (("src", config.src_token), ("tgt", config.tgt_token)):
        if given is not None and given != tokens[side]:
            raise DataError(
                f"{ctx.step_id}: {side}_token {given!r}, but input model {model.path} was "
                f"trained with {tokens[side]!r} for {getattr(config, side)!r}"
            )
    for role, member in members.items():
        if member.meta.get("language_tokens") != tokens:
            raise DataError(
                f"{ctx.step_id}: input {role} ({member.path}) was trained with language "
                f"tokens {member.meta.get('language_tokens')}, input model with {tokens}: an "
                "ensemble reads one tokenization"
            )
    reasons = obstacles(config, members, ctx.registry)
    if reasons:
        why = "; ".join(reasons)
        if config.backend == "ctranslate2":
            raise DataError(
                f"{ctx.step_id}: input model {model.path} was continued from a pretrained "
                f"model; backend ctranslate2 cannot decode: {why}"
            )
        ctx.log.info("%s: decodes with fairseq: %s", ctx.step_id, why)
        ctx.metrics["backend"] = "fairseq"
        return ""
    ctx.metrics["backend"] = "ctranslate2"
    return str(converted(model, config.src, config.tgt, config.models, ctx.registry))


def check_pretrained_member(
    config: TranslateConfig, step_id: str, members: dict[str, Artifact]
) -> None:
    """One pretrained model that has both languages (CTranslate2 has no ensembles)."""
    if len(members) > 1:
        raise DataError(
            f"{step_id}: input model is a pretrained model; it decodes alone (CTranslate2 has "
            f"no ensembles), not with {', '.join(r for r in members if r != 'model')}"
        )
    model = members["model"]
    where = f"{step_id}: input model ({model.path})"
    check_pretrained(where, model.meta, config.src, config.tgt, config.src_token, config.tgt_token)

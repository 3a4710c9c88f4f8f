"""Translates the source side of a corpus with a fairseq checkpoint, or an ensemble of several
sharing one dictionary, in-process, in input order. Right-to-left models (train ``direction:
r2l``) have their output put back in reading order."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field, field_validator

from mtcore.corpus import Corpus, CorpusWriter, batched
from mtcore.errors import DataError, StepError
from mtcore.plugin import PluginConfig
from mtcore.step import Artifact, Step, StepContext
from mtcore_plugins.steps.binarize import load_spm
from mtcore_plugins.steps.checkpoints import first_difference
from mtcore_plugins.steps.fairseq_entry import (
    add_safe_globals,
    register_models,
    root_logging_kept,
)

# NT5 §4.4 (footnote 7) ensembles up to eight models; Xiaomi §3.3 and HW-TSC §5.3 four.
MODEL_ROLES = ("model", *(f"model{i}" for i in range(2, 9)))


class TranslateConfig(PluginConfig):
    src: str = Field(min_length=1, max_length=32, description="source language (corpus column)")
    tgt: str = Field(min_length=1, max_length=32, description="target language of the output")
    beam: int = Field(5, ge=1, le=256, description="beam size")
    lenpen: float = Field(1.0, ge=0.0, le=10.0, description="length penalty (>1 favours longer)")
    max_len_a: float = Field(
        1.5, ge=0.0, le=100.0, description="output length limit a*source_tokens + b (a)"
    )
    max_len_b: int = Field(10, ge=0, le=10_000, description="output length limit (b)")
    batch_size: int = Field(64, ge=1, le=100_000, description="sentences per batch")
    max_tokens: int | None = Field(
        None, ge=16, le=1_000_000, description="source tokens per batch, when set"
    )
    chunk_lines: int = Field(
        2000,
        ge=1,
        le=1_000_000,
        description="lines read, sorted by length and translated at a time",
    )
    threads: int = Field(0, ge=0, le=512, description="torch CPU threads; 0 keeps torch's default")
    models: list[str] = Field(
        ["transformer_presets"],
        max_length=32,
        description="mtcore.models plugins to register before loading (each model's own are added)",
    )
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


class TranslateStep(Step):
    """One output line per input line, in input order: empty input gives empty output, and a
    source longer than the model's positions is truncated (``translate.truncated``). Inputs
    ``model2`` ... ``model8`` make an ensemble with ``model`` (NT5 §4.4: architectures may
    differ; dictionaries, languages and direction must not)."""

    name = "translate"
    Config = TranslateConfig
    config: TranslateConfig
    inputs: ClassVar[dict[str, bool]] = {
        "model": True,
        "corpus": True,
        "spm": True,
        **{role: False for role in MODEL_ROLES[1:]},
    }
    outputs: ClassVar[tuple[str, ...]] = ("hyp",)

    def plugins_used(self) -> list[tuple[str, str]]:
        return [("models", name) for name in self.config.models]

    def run(self, ctx: StepContext) -> None:
        import torch

        corpus = Corpus.open(ctx.inputs["corpus"].path)
        if self.config.src not in corpus.langs:
            raise DataError(
                f"{ctx.step_id}: corpus {corpus.path} has languages "
                f"{list(corpus.langs)}, not the source {self.config.src!r}"
            )
        column = corpus.langs.index(self.config.src)
        threads = torch.get_num_threads()
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        try:
            translator = Translator(self.config, ctx)
            self._translate(ctx, corpus, column, translator)
        finally:
            torch.set_num_threads(threads)

    def _translate(self, ctx: StepContext, corpus: Corpus, column: int, translator: Any) -> None:
        started = time.time()
        writer = CorpusWriter(ctx.output("hyp"), (self.config.tgt,), name="hyp")
        inputs = 0
        with writer, ctx.progress(corpus.count(), "translate") as bar:
            for chunk in batched(corpus, self.config.chunk_lines):
                lines = [pair[column] for pair in chunk]
                outputs = translator.translate(lines)
                if len(outputs) != len(lines):
                    raise StepError(
                        f"{ctx.step_id}: {len(outputs)} outputs for {len(lines)} inputs"
                    )
                for text in outputs:
                    writer.write((text,))
                inputs += len(lines)
                bar.update(len(lines))
        if writer.lines != inputs:
            raise StepError(f"{ctx.step_id}: wrote {writer.lines} lines for {inputs} inputs")
        seconds = time.time() - started
        ctx.stats.add("translate.lines", inputs)
        ctx.metrics["sentences_per_second"] = round(inputs / max(seconds, 1e-9), 2)
        ctx.metrics["seconds"] = round(seconds, 1)


class Translator:
    """Loaded checkpoints (one, or an ensemble) with their dictionaries, SentencePiece model
    and beam search."""

    def __init__(self, config: TranslateConfig, ctx: StepContext) -> None:
        with root_logging_kept():
            from fairseq import checkpoint_utils, utils
            from fairseq.sequence_generator import SequenceGenerator

        members = {role: ctx.inputs[role] for role in MODEL_ROLES if role in ctx.inputs}
        self.direction = check_members(config, ctx.step_id, members)
        # Unregistered architectures make fairseq fail later with a misleading IndexError.
        plugins = [*config.models, *(n for m in members.values() for n in m.meta.get("models", []))]
        register_models(list(dict.fromkeys(plugins)), ctx.registry)
        add_safe_globals()
        first = members["model"].path
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(m.path / m.meta.get("checkpoint", "checkpoint.pt")) for m in members.values()],
            arg_overrides={
                "data": str(first),
                "source_lang": config.src,
                "target_lang": config.tgt,
            },
        )
        for model in models:
            model.eval()
        weigh_models(models, [config.weights.get(role, 1.0) for role in members])
        self.config, self.ctx, self.models = config, ctx, models
        self.src_dict, self.tgt_dict = task.source_dictionary, task.target_dictionary
        self.max_source = utils.resolve_max_positions(
            task.max_positions(), *[m.max_positions() for m in models]
        )[0]
        self.spm = load_spm(ctx.inputs["spm"].path)
        self.generator = SequenceGenerator(
            models,
            self.tgt_dict,
            beam_size=config.beam,
            len_penalty=config.lenpen,
            max_len_a=config.max_len_a,
            max_len_b=config.max_len_b,
        )

    def translate(self, lines: list[str]) -> list[str]:
        """Translations of ``lines`` in their order; batches are formed by source length."""
        tokens = [self._encode(pieces) for pieces in self.spm.encode(lines, out_type=str)]
        outputs = [""] * len(lines)
        order = sorted(
            (i for i in range(len(lines)) if len(tokens[i]) > 1), key=lambda i: (len(tokens[i]), i)
        )
        self.ctx.stats.add("translate.empty", len(lines) - len(order))
        for batch in self._batches(order, tokens):
            for index, text in zip(batch, self._generate([tokens[i] for i in batch]), strict=True):
                outputs[index] = text
        return outputs

    def _encode(self, pieces: list[str]) -> Any:
        ids = self.src_dict.encode_line(
            " ".join(pieces), add_if_not_exist=False, append_eos=True
        ).long()
        if self.max_source is not None and len(ids) > self.max_source:
            self.ctx.stats.add("translate.truncated")
            ids = ids[: self.max_source].clone()
            ids[-1] = self.src_dict.eos()
        return ids

    def _batches(self, order: list[int], tokens: list[Any]) -> Iterator[list[int]]:
        batch: list[int] = []
        longest = 0
        limit = self.config.max_tokens
        for index in order:
            longest = max(longest, len(tokens[index]))
            over_tokens = limit is not None and batch and longest * (len(batch) + 1) > limit
            if batch and (len(batch) >= self.config.batch_size or over_tokens):
                yield batch
                batch, longest = [], len(tokens[index])
            batch.append(index)
        if batch:
            yield batch

    def _generate(self, sources: list[Any]) -> list[str]:
        import torch
        from fairseq.data import data_utils

        src_tokens = data_utils.collate_tokens(
            sources, self.src_dict.pad(), self.src_dict.eos(), left_pad=True
        )
        sample = {
            "net_input": {
                "src_tokens": src_tokens,
                "src_lengths": torch.tensor([len(s) for s in sources]),
            }
        }
        with torch.inference_mode():
            hypos = self.generator.generate(self.models, sample)
        return [self._decode(h[0]["tokens"]) if h else "" for h in hypos]

    def _decode(self, tokens: Any) -> str:
        pieces = self.tgt_dict.string(tokens.int().cpu()).split()
        if self.direction == "r2l":  # the model wrote the sentence last piece first
            pieces.reverse()
        return str(self.spm.decode_pieces(pieces))


def check_members(config: TranslateConfig, step_id: str, members: dict[str, Artifact]) -> str:
    """Every model translates src->tgt in one direction with the first model's dictionaries;
    every weighted role is connected. Returns the direction (l2r or r2l)."""
    for role in config.weights:
        if role not in members:
            raise DataError(
                f"{step_id}: weights names input {role!r}, which is not connected "
                f"(connected: {', '.join(members)})"
            )
    first = members["model"]
    for role, member in members.items():
        meta, where = member.meta, f"{step_id}: input {role} ({member.path})"
        if meta.get("type") != "fairseq-model":
            raise DataError(f"{where} is not a fairseq model (artifact type {meta.get('type')!r})")
        if (meta.get("src"), meta.get("tgt")) != (config.src, config.tgt):
            raise DataError(
                f"{where} translates {meta.get('src')}->{meta.get('tgt')}, "
                f"not {config.src}->{config.tgt} (check src/tgt)"
            )
        if meta.get("direction", "l2r") != first.meta.get("direction", "l2r"):
            raise DataError(
                f"{where} is {meta.get('direction', 'l2r')}, input model is "
                f"{first.meta.get('direction', 'l2r')}: an ensemble decodes in one direction"
            )
        for lang in (config.src, config.tgt):
            name = f"dict.{lang}.txt"
            difference = first_difference(first.path / name, member.path / name)
            if difference:
                raise DataError(
                    f"{where}: its dictionary differs from input model's ({difference}); an "
                    "ensemble needs one dictionary (binarize every model's data with one "
                    "SentencePiece model and dictionary)"
                )
    return str(first.meta.get("direction", "l2r"))


def weigh_models(models: list[Any], weights: list[float]) -> None:
    """fairseq's ensemble averages next-token probabilities uniformly: log(sum_i p_i / n). A
    model whose log-probabilities are shifted by log(n * w_i) (weights normalised to sum to 1)
    turns that into log(sum_i w_i p_i), the weighted mixture."""
    total = sum(weights)
    for model, weight in zip(models, weights, strict=True):
        offset = math.log(len(models) * weight / total)
        if offset == 0.0:
            continue
        normalized = model.get_normalized_probs

        def shifted(
            net_output: Any,
            log_probs: bool,
            sample: Any = None,
            *,
            _probs: Any = normalized,
            _offset: float = offset,
        ) -> Any:
            probs = _probs(net_output, log_probs, sample)
            return probs + _offset if log_probs else probs * math.exp(_offset)

        model.get_normalized_probs = shifted

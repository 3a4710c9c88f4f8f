"""The settings of the ``translate`` step, shared with the steps that decode the same way
(``select_models`` translating a dev set with each candidate, ``rerank`` sizing its workers)."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mtcore.api import HASHED_WHEN_SET, NOT_IDENTITY, Executor, PluginConfig, components
from mtcore.api.engine import ignored_when
from mtcore_plugins.common.decoding.translator import MODEL_ROLES


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
        "cores shared out between several (where it runs: not in the step's hash)",
        json_schema_extra=NOT_IDENTITY,
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
    src_token: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="a pretrained multilingual model's token for the source language (M2M-100 "
        "__en__ or en, NLLB eng_Latn); null: found from src",
        json_schema_extra=HASHED_WHEN_SET,
    )
    tgt_token: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="as src_token, for the target language (NLLB zho_Hant rather than the "
        "zho_Hans that zh finds)",
        json_schema_extra=HASHED_WHEN_SET,
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


def worker_threads(threads: int, executor: Any) -> int:
    """torch threads per worker: the setting, or the cores shared out between several workers
    (0: torch's default, when the executor runs one task at a time)."""
    if threads:
        return threads
    workers = executor.workers if isinstance(executor, Executor) else 1
    return max(1, (os.cpu_count() or 1) // workers) if workers > 1 else 0

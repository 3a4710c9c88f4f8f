"""Settings of the ``train`` step. Defaults follow NT5 Table 2, "Initial Translation Model",
unless noted; other papers' values are cited where a setting comes from them."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from mtcore.api import HASHED_WHEN_SET, NOT_IDENTITY, PluginConfig, components

CRITERION_KEY = re.compile(r"[a-z][a-z0-9_]*$")
# Settings the step owns; giving them again through criterion_args would pass them twice.
OWN_CRITERION_SETTINGS = {"label_smoothing"}


class TrainConfig(PluginConfig):
    arch: str = Field(
        "mtcore_transformer_tiny",
        min_length=1,
        max_length=100,
        description="fairseq architecture (--arch), built in or from a models plugin",
    )
    models: list[str] = Field(
        ["transformer_presets"],
        max_length=32,
        description="mtcore.models plugins to register before fairseq starts (architectures, "
        "criteria); an init model's plugins are added",
        json_schema_extra=components("models"),
    )
    max_update: int = Field(
        50_000,
        ge=1,
        le=10_000_000,
        description="stop after this many updates (a fine-tuning counts from 0; NT5 §4.3: 600)",
    )
    max_epoch: int | None = Field(None, ge=1, le=100_000, description="stop after this many epochs")
    max_tokens: int = Field(4096, ge=16, le=1_000_000, description="tokens per batch per process")
    update_freq: int = Field(
        1,
        ge=1,
        le=1024,
        description="batches accumulated per update: an update sees max_tokens x update_freq x "
        "distributed_world_size tokens (with batch_tokens: follows from the width instead)",
    )
    batch_tokens: int | None = Field(
        None,
        ge=16,
        le=1_000_000_000,
        description="tokens per update (the paper's batch), at any width: the step runs as many "
        "ranks as its resources give it (gpus: 8, ranks: 2, a range chosen by the planner) and "
        "accumulates batch_tokens / (max_tokens x ranks) batches an update, which must be whole; "
        "update_freq and distributed_world_size are then left at 1",
        json_schema_extra=HASHED_WHEN_SET,
    )
    optimizer: Literal["adam", "adafactor"] = Field(
        "adam",
        description="adam (NT5 Table 2) or adafactor (Xiaomi §4.1: the memory-efficient choice "
        "for deep models)",
    )
    lr: float = Field(0.001, gt=0.0, le=10.0, description="peak (or, with fixed, constant) LR")
    lr_scheduler: Literal["inverse_sqrt", "fixed", "polynomial_decay", "cosine"] = Field(
        "inverse_sqrt",
        description="learning-rate schedule (Table 2: inverse square root decay; fixed for "
        "fine-tuning, Table 2 'Fine-tuning Configuration')",
    )
    warmup_updates: int = Field(
        4000,
        ge=0,
        le=1_000_000,
        description="linear warmup updates (set 0 with fixed for no warmup, as NT5 fine-tuning)",
    )
    warmup_init_lr: float = Field(
        1e-7, ge=0.0, le=10.0, description="learning rate at update 0 (inverse_sqrt, cosine)"
    )
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0, description="Adam beta1")
    adam_beta2: float = Field(0.98, ge=0.0, lt=1.0, description="Adam beta2")
    adam_eps: float = Field(1e-8, gt=0.0, le=1.0, description="Adam epsilon")
    adafactor_beta1: float | None = Field(
        None,
        ge=0.0,
        lt=1.0,
        description="Adafactor first-moment decay; unset keeps no first moment (what makes "
        "Adafactor small, fairseq's default)",
    )
    adafactor_decay_rate: float = Field(
        -0.8, ge=-1.0, le=0.0, description="Adafactor second-moment decay exponent (fairseq's)"
    )
    adafactor_clip_threshold: float = Field(
        1.0, gt=0.0, le=100.0, description="Adafactor update clipping threshold (fairseq's)"
    )
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="weight decay")
    clip_norm: float = Field(1.0, ge=0.0, le=1000.0, description="gradient clipping; 0 disables")
    dropout: float = Field(0.3, ge=0.0, le=0.9, description="dropout")
    attention_dropout: float | None = Field(
        None, ge=0.0, le=0.9, description="attention dropout; unset keeps the arch's"
    )
    criterion: str = Field(
        "label_smoothed_cross_entropy",
        min_length=1,
        max_length=100,
        pattern=r"^[a-z][a-z0-9_]*$",
        description="fairseq criterion, built in or registered by a plugin in models (R-Drop, say)",
    )
    criterion_args: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        max_length=50,
        description="the criterion's own settings, each passed as --key-name value (a true "
        "boolean as a bare flag, a false one left out), e.g. {alpha: 5} for R-Drop (HW-TSC §4)",
    )
    label_smoothing: float = Field(
        0.1,
        ge=0.0,
        le=0.9,  # not in the paper: fairseq's usual value
        description="label smoothing, for criteria that have the setting (others ignore it)",
    )
    share_all_embeddings: bool = Field(
        True, description="tie encoder, decoder and output embeddings (the dictionary is joined)"
    )
    direction: Literal["l2r", "r2l"] = Field(
        "l2r",
        description="r2l trains on target sentences read right to left (Xiaomi §3.2, NT5 §5.1): "
        "reversed at train time, so the same binarize step serves both; translate puts the "
        "output back in reading order",
    )
    init_vocab: Literal["same", "map"] = Field(
        "same",
        description="with an init model: same fine-tunes it and needs the data's dictionaries "
        "to equal its own; map starts a different vocabulary from its rows (shared tokens "
        "exact, new ones from rare entries: HW-TSC §3.3)",
    )
    best_metric: Literal["loss", "bleu"] = Field(
        "loss",
        description="dev metric for patience and average_best: loss (lower is better) or BLEU "
        "of a beam search on the valid set (higher is better)",
    )
    patience: int = Field(
        0,
        ge=0,
        le=100_000,
        description="stop when best_metric has not improved for N validations (one at every "
        "save); 0 disables. Xiaomi §4.1: 16 checkpoints of 2,000 updates",
    )
    bleu_tokenize: Literal["pieces", "detok", "ja-mecab", "zh", "char"] = Field(
        "pieces",
        description="dev BLEU over SentencePiece pieces (any script), or over decoded text "
        "tokenized by sacrebleu: detok (13a, spaced scripts), ja-mecab, zh or char",
    )
    bleu_beam: int = Field(
        4, ge=1, le=64, description="beam of the dev BLEU decoding (Xiaomi §4.1: 4, one model)"
    )
    seed: int = Field(1, ge=0, le=2**31 - 1, description="random seed")
    save_interval_updates: int = Field(
        200, ge=1, le=1_000_000, description="save (and validate) every N updates"
    )
    keep_last: int = Field(8, ge=1, le=1000, description="interval checkpoints kept while training")
    average_last: int = Field(
        8, ge=1, le=1000, description="average the last N checkpoints into checkpoint.pt"
    )
    average_best: int = Field(
        0,
        ge=0,
        le=1000,
        description="when > 0, average the N checkpoints with the best best_metric instead "
        "(Xiaomi §4.1: the top 10 by dev BLEU)",
    )
    average_until: Literal["last", "best"] = Field(
        "last",
        description="where the average_last checkpoints end: at the last one, or (with "
        "patience, early stopping) at the one with the best best_metric, so that the average "
        "is of the checkpoints up to the early-stopping point, not of the patience window after "
        "it (NT5 §4.3 with Table 2: early stopping, the last ten averaged)",
    )
    precision: Literal["fp32", "fp16", "bf16"] = Field(
        "fp32",
        description="fp16/bf16 mixed precision needs a CUDA GPU (Xiaomi §4.1, Yishu §3.1 train "
        "with FP16); asking for it on a machine without one is an error",
    )
    distributed_world_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="training processes on this machine, started through torchrun: one per "
        "GPU, or gloo processes on CPU",
    )
    too_long: Literal["error", "skip"] = Field(
        "error",
        description="training pairs longer than the model's positions or max_tokens: error stops "
        "before the first update; skip leaves them out, counted as train.skipped_too_long "
        "(fairseq itself skips them with only a warning)",
    )
    threads: int = Field(
        0,
        ge=0,
        le=512,
        description="torch CPU threads per process; 0 keeps torch's default (where a step runs, "
        "not what it computes: not in its hash)",
        json_schema_extra=NOT_IDENTITY,
    )
    log_interval: int = Field(100, ge=1, le=1_000_000, description="log every N updates")
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="further fairseq-train arguments, passed verbatim",
    )

    @field_validator("criterion_args")
    @classmethod
    def _criterion_keys(
        cls, value: dict[str, bool | int | float | str]
    ) -> dict[str, bool | int | float | str]:
        for key, setting in value.items():
            if not CRITERION_KEY.match(key):
                raise ValueError(f"{key!r} is not a setting name (lower_snake_case, e.g. alpha)")
            if key in OWN_CRITERION_SETTINGS:
                raise ValueError(f"{key!r} is a train step setting: set {key} there instead")
            if isinstance(setting, str) and len(setting) > 1000:
                raise ValueError(f"{key!r}: value longer than 1000 characters")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.batch_tokens is not None:
            if self.update_freq != 1 or self.distributed_world_size != 1:
                raise ValueError(
                    "batch_tokens sets the batch at any width: leave update_freq and "
                    "distributed_world_size at 1 (the width comes from resources: gpus or ranks)"
                )
            if self.batch_tokens % self.max_tokens:
                raise ValueError(
                    f"batch_tokens {self.batch_tokens} is not a whole number of batches of "
                    f"max_tokens {self.max_tokens}"
                )
        if self.average_until == "best" and (self.patience == 0 or self.average_best):
            raise ValueError(
                "average_until: best needs patience (early stopping) and no average_best"
            )
        if (
            self.direction == "r2l"
            and self.best_metric == "bleu"
            and self.bleu_tokenize != "pieces"
        ):
            raise ValueError(
                "direction r2l with best_metric bleu needs bleu_tokenize: pieces (dev outputs "
                "are right to left; decoded text would be scrambled)"
            )
        return self

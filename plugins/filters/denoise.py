"""Clean-vs-noisy denoise score (HW-TSC §2.3, eq. 1, after Wang et al. 2018):

    score = (log P(y|x; θ_clean) - log P(y|x; θ_noisy)) / |y|

θ_noisy is a model trained on the (noisy) corpus, θ_clean the same model fine-tuned on a small
trusted set (a train step with ``init: <noisy model>`` on the trusted data). "Higher score
means higher quality": the fine-tuning raised the pair's probability. Data rejuvenation
(HW-TSC §3.5) drops the lowest 10-20 % by this score and continues training on the rest (see
docs/selection.md).

Each pair is force-decoded by both models in-process (the shared fairseq force decoder of the
rerank scorers, ``common/decoding/force.py``: batched by length, each distinct source encoded
once, models loaded once per worker), or with ``backend: ctranslate2`` by CTranslate2's
``score_batch`` on the converted models (``auto``: where both convert, else fairseq with the
reason logged; docs/decoding.md). ``|y|`` counts the target's SentencePiece tokens plus
the end-of-sentence token, the positions the model predicts; log is natural. A pair longer than
the models' positions scores NaN (fails the threshold, ranks last). Both models must share
their dictionaries (a fine-tuned model does) and translate ``source`` -> the other language.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from mtcore.api import NOT_IDENTITY, Filter, Pair, PluginConfig, PluginError
from mtcore_plugins.filters import _nmt


class DenoiseConfig(PluginConfig):
    clean: str = Field(
        "clean", min_length=1, description="step input role of θ_clean (the fine-tuned model)"
    )
    noisy: str = Field(
        "noisy", min_length=1, description="step input role of θ_noisy (the base model)"
    )
    spm: str = Field(
        "spm", min_length=1, description="step input role of the models' SentencePiece model"
    )
    source: str | None = Field(
        None, description="the models' source language; the corpus' first language when unset"
    )
    min_score: float | None = Field(
        None,
        description="lowest score kept; unset keeps every pair (HW-TSC §3.5 ranks instead: "
        "`keep: {top_fraction: 0.85}` or a select step)",
    )
    batch_size: int = Field(
        64,
        ge=1,
        le=100_000,
        description="pairs per forward pass (fairseq backend)",
        json_schema_extra=NOT_IDENTITY,
    )
    max_tokens: int = Field(
        8192,
        ge=16,
        le=10_000_000,
        description="padded target tokens per forward pass",
        json_schema_extra=NOT_IDENTITY,
    )
    threads: int = Field(
        1,
        ge=1,
        le=256,
        description="torch (or CTranslate2) threads per worker",
        json_schema_extra=NOT_IDENTITY,
    )
    backend: Literal["fairseq", "ctranslate2", "auto"] = Field(
        "fairseq",
        description="force decoder: fairseq, or CTranslate2's score_batch on the converted "
        "models (scores equal fairseq's to ~1e-4 in float32; auto falls back to fairseq, "
        "saying why)",
    )
    plugins: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="mtcore.models plugins the models need beyond their own (CTranslate2's "
        "conversion check)",
    )


class DenoiseFilter(Filter[DenoiseConfig]):
    """Score: per-token log-probability gain of the clean model over the noisy one (nats)."""

    name = "denoise"
    higher_is_better = True

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        config = self.config
        if len(langs) != 2:
            raise PluginError(f"filter 'denoise' scores pairs; the corpus has {list(langs)}")
        self.src = config.source if config.source is not None else langs[0]
        if self.src not in langs:
            raise PluginError(
                f"filter 'denoise': source {self.src!r} is not a corpus language ({list(langs)})"
            )
        self.tgt = langs[1 - langs.index(self.src)]
        self.models = {role: self.resource(role) for role in (config.clean, config.noisy)}
        self.spm_dir = self.resource(config.spm)
        self._decoders: dict[str, Any] = {}
        for role, folder in self.models.items():
            meta = _nmt.model_meta(folder, role, self.name)
            if (meta.get("src"), meta.get("tgt")) != (self.src, self.tgt):
                raise PluginError(
                    f"filter 'denoise': model {role!r} ({folder}) translates "
                    f"{meta.get('src')}->{meta.get('tgt')}, not {self.src}->{self.tgt} (set source)"
                )
        self._check_same_dictionaries()

    def _check_same_dictionaries(self) -> None:
        from mtcore_plugins.common.fairseq.checkpoints import first_difference

        config = self.config
        clean, noisy = self.models[config.clean], self.models[config.noisy]
        for lang in (self.src, self.tgt):
            difference = first_difference(noisy / f"dict.{lang}.txt", clean / f"dict.{lang}.txt")
            if difference:
                raise PluginError(
                    f"filter 'denoise': the clean and noisy models' dictionaries differ "
                    f"({difference}); fine-tune the clean model from the noisy one (train `init`)"
                )

    def _decoder(self, role: str) -> Any:
        """The force decoder of ``role``'s model, built once per worker: CTranslate2's where
        the backend asks for it and the model converts, else the shared fairseq one."""
        config = self.config
        decoders = self._decoders
        if role not in decoders:
            from mtcore.api import Artifact

            members = {"model": Artifact.open(self.models[role])}
            where = f"filter {self.name!r} ({role})"
            decoder = None
            if config.backend != "fairseq":
                from mtcore_plugins.common.ct2.force import ct2_force_decoder

                decoder = ct2_force_decoder(
                    members, self.src, self.tgt, self.spm_dir, config, where, config.threads
                )
            if decoder is None:
                import torch

                from mtcore_plugins.common.decoding.force import ForceDecoder
                from mtcore_plugins.common.decoding.translator import load_ensemble

                torch.set_num_threads(config.threads)
                ensemble = load_ensemble(
                    self.src, self.tgt, members, self.spm_dir, config.plugins, {}, where
                )
                decoder = ForceDecoder(ensemble, config.max_tokens, config.batch_size)
            decoders[role] = decoder
        return decoders[role]

    def log_probs(self, role: str, batch: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray]:
        """(log P(y|x), |y|) of every pair under the model connected to ``role``; NaN where a
        side is longer than the model's positions."""
        s, t = self.langs.index(self.src), self.langs.index(self.tgt)
        decoder = self._decoder(role)
        sums, counts = decoder.score([p[s] for p in batch], [p[t] for p in batch], np.nan)
        return np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)

    def score(self, batch: Sequence[Pair]) -> list[float]:
        if not batch:
            return []
        config = self.config
        clean, length = self.log_probs(config.clean, batch)
        noisy, _ = self.log_probs(config.noisy, batch)
        scores: list[float] = ((clean - noisy) / length).tolist()
        return scores

    def accept(self, score: Any) -> bool:
        config = self.config
        if config.min_score is None:
            return True
        return bool(math.isfinite(score) and score >= config.min_score)

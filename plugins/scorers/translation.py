"""Translation-model rerank features by force decoding (NT5 §5.1, Xiaomi §3.4): ``forward``
scores log P(hypothesis | source) with source-to-target models, ``backward`` log P(source |
hypothesis) with target-to-source models. Each takes one model or an ensemble (the rerank
step's input roles in ``models``) in either reading direction: ``direction: r2l`` asks for
right-to-left models (NT5's "R2L forward and backward translation models"), which read the
target last piece first.

Normalization (``normalize``): ``token`` divides the summed log-probability by the target's
tokens (EOS included), ``prob`` turns that into the per-token probability in [0, 1] that NT5's
MERT weighs (§5.1: P_j(s_i, e) in [0, 1]), ``sum`` keeps the sentence log-probability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from mtcore.api import NOT_IDENTITY, Artifact, PluginConfig, PluginError, Scorer


class TranslationScorerConfig(PluginConfig):
    models: list[str] = Field(
        ["model"],
        min_length=1,
        max_length=8,
        description="the rerank step's input roles of the models (several: an ensemble)",
    )
    weights: dict[str, float] = Field(
        default_factory=dict, description="ensemble weight per role in `models`; unnamed weigh 1"
    )
    spm: str = Field("spm", min_length=1, description="input role of the SentencePiece model")
    direction: Literal["auto", "l2r", "r2l"] = Field(
        "auto",
        description="reading direction the models must have (r2l: NT5 §5.1 R2L models); auto "
        "takes the models' own",
    )
    normalize: Literal["token", "prob", "sum"] = Field(
        "token",
        description="token: mean log-probability per target token; prob: exp of it, in [0, 1] "
        "(NT5 §5.1); sum: sentence log-probability",
    )
    plugins: list[str] = Field(
        ["transformer_presets"],
        max_length=32,
        description="mtcore.models plugins to register before loading (each model's own are added)",
    )
    max_tokens: int = Field(
        4096,
        ge=16,
        le=1_000_000,
        description="padded target tokens per batch",
        json_schema_extra=NOT_IDENTITY,
    )
    backend: Literal["fairseq", "ctranslate2", "auto"] = Field(
        "fairseq",
        description="force decoder: fairseq, or CTranslate2's score_batch on the converted "
        "model (one model; auto falls back to fairseq, saying why). docs/decoding.md",
    )

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {role: w for role, w in value.items() if not 0.0 < w <= 1000.0}
        if bad:
            raise ValueError(f"weights must be > 0 and <= 1000: {bad}")
        return value


class TranslationScorer(Scorer[TranslationScorerConfig]):
    """Shared by ``forward`` and ``backward``: loads the ensemble in ``setup``."""

    backward = False

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        from mtcore_plugins.common.decoding.force import ForceDecoder
        from mtcore_plugins.common.decoding.translator import MODEL_ROLES, load_ensemble

        super().setup(src, tgt, resources)
        config = self.config
        missing = [role for role in config.weights if role not in config.models]
        if missing:
            raise PluginError(f"scorer {self.name!r}: weights name {missing}, not in models")
        # load_ensemble checks members under the translate step's role names.
        members = {
            slot: Artifact.open(self.resource(role))
            for slot, role in zip(MODEL_ROLES, config.models, strict=False)
        }
        weights = {
            slot: config.weights.get(role, 1.0)
            for slot, role in zip(MODEL_ROLES, config.models, strict=False)
        }
        reads, writes = (tgt, src) if self.backward else (src, tgt)
        if members["model"].meta.get("type") == "pretrained-model":
            self.decoder = self._pretrained(members, reads, writes)
            return
        if config.backend != "fairseq":
            from mtcore_plugins.common.ct2.force import ct2_force_decoder
            from mtcore_plugins.common.decoding.translator import check_members

            where = f"scorer {self.name!r}"
            direction = check_members(reads, writes, weights, where, members)
            self._check_direction(direction, members["model"].path)
            spm = self.resource(config.spm)
            self.decoder = ct2_force_decoder(members, reads, writes, spm, config, where)
            if self.decoder is not None:
                return
        ensemble = load_ensemble(
            reads, writes, members, self.resource(config.spm), config.plugins, weights,
            f"scorer {self.name!r}",
        )  # fmt: skip
        self._check_direction(ensemble.direction, members["model"].path)
        self.decoder = ForceDecoder(ensemble, config.max_tokens)

    def _pretrained(self, members: dict[str, Artifact], reads: str, writes: str) -> Any:
        """A pretrained model of the recipe's ``models`` (OPUS-MT, M2M-100, NLLB, mBART-50):
        scored alone by CTranslate2 with its own tokenizer, whatever ``backend`` says."""
        from mtcore_plugins.common.ct2.force import Ct2ForceDecoder
        from mtcore_plugins.common.hub.pretrained import (
            PretrainedTokens,
            check_pretrained,
            converted_pretrained,
        )

        where = f"scorer {self.name!r}: model {members['model'].path}"
        if len(members) > 1:
            raise PluginError(f"{where} is a pretrained model; it scores alone (no ensembles)")
        if self.config.direction == "r2l":  # type: ignore[attr-defined]
            raise PluginError(f"{where} reads left to right; direction r2l asks for an R2L model")
        model = members["model"]
        check_pretrained(where, model.meta, reads, writes)
        tokens = PretrainedTokens.load(model, reads, writes)
        path = converted_pretrained(model)
        return Ct2ForceDecoder(path, None, "l2r", self.config.max_tokens, tokens=tokens)  # type: ignore[attr-defined]

    def _check_direction(self, direction: str, path: Path) -> None:
        wanted = self.config.direction  # type: ignore[attr-defined]
        if wanted not in ("auto", direction):
            raise PluginError(
                f"scorer {self.name!r} asks for {wanted} models; {path} is {direction} (set "
                f"direction: {direction} or connect an {wanted} model)"
            )

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        from mtcore_plugins.common.decoding.force import normalize

        if not pairs:
            return []
        config = self.config
        sources = [p[1] if self.backward else p[0] for p in pairs]
        targets = [p[0] if self.backward else p[1] for p in pairs]
        sums, counts = self.decoder.score(sources, targets)
        return normalize(sums, counts, config.normalize)


class ForwardScorer(TranslationScorer):
    """log P(hypothesis | source) under source-to-target models."""

    name = "forward"


class BackwardScorer(TranslationScorer):
    """log P(source | hypothesis) under target-to-source models (NT5 §5.1 backward models,
    Xiaomi §3.4 T2S-L2R)."""

    name = "backward"
    backward = True

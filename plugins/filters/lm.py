"""Language-model fluency of each side, under the ``kenlm`` step's models.

Two published uses, chosen with ``mode``:

``normalized`` (Xiaomi §2.2.2): "We normalize the LM perplexity (PPL) scores of all the
sentences to be between [0,1]. Sentences whose normalized PPL scores fall below the threshold
(0.45 and 0.53 for Chinese and Japanese data, respectively) are removed." The paper does not
give the normalization. Our reading, and why:

- min-max scaling ("to be between [0,1]"), inverted, since removing scores *below* a threshold
  must remove the disfluent (high-perplexity) sentences: ``(max - x) / (max - min)``;
- over log perplexity ``x = log10 PPL`` (per-token cross-entropy) rather than raw PPL: raw
  perplexity is so heavy-tailed that one garbage line would squeeze every other sentence
  against 1 and the published thresholds near the middle of the range would remove nothing;
- ``min``/``max`` over "all the sentences", which a batch alone cannot see: the ``kenlm`` step
  records the range over its training sentences (Xiaomi trains the LM on each side of the very
  corpus it filters, so they are that corpus) or over the corpus connected to its ``normalize``
  input (the corpus to be cleaned, when the LM is trained on other text; a model's own training
  sentences score far better than unseen ones). Sentences outside the range are clipped.

A side is kept when its score is at least its language's threshold; every side with a model
must pass.

``combined`` (Yishu §2.1.1, Eq. 1-2): ``Score_sentence = PPL`` and ``Score_com = λ *
Score_src + (1 - λ) * Score_tgt``, λ between 0.2 and 0.8 by language pair (0.7 for an English
source and Chinese target). Raw perplexities, as the equations write them; lower is better.
Yishu gives no threshold (a recipe ranks with ``keep`` or sets ``max_perplexity``).

Ranking: ``higher_is_better`` is True for both modes; in ``combined`` mode ``rank_key`` is the
negated combined perplexity, so a ``keep: {top_fraction: ...}`` keeps the most fluent pairs.

Text is tokenized exactly as the ``kenlm`` step tokenized its training text
(:func:`mtcore_plugins.steps.kenlm.lm_line`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from mtcore.api import Artifact, Filter, Pair, PluginConfig, PluginError
from mtcore_plugins.common.lm.ngram import kenlm_meta, load_model


def base_lang(lang: str) -> str:
    """``zh`` for ``zh_CN``, ``zh-Hans`` ..."""
    return lang.replace("-", "_").split("_", 1)[0].lower()


class LanguageModelConfig(PluginConfig):
    lm: str = Field(
        "lm", min_length=1, description="the clean step's input role connected to a kenlm step"
    )
    mode: Literal["normalized", "combined"] = Field(
        "normalized",
        description="normalized: per-side perplexity scaled to [0,1], kept at or above the "
        "language's threshold (Xiaomi §2.2.2); combined: lambda * PPL_src + (1 - lambda) * "
        "PPL_tgt, lower is better (Yishu §2.1.1)",
    )
    thresholds: dict[str, float] = Field(
        # Xiaomi §2.2.2: 0.45 for Chinese, 0.53 for Japanese.
        default_factory=lambda: {"zh": 0.45, "ja": 0.53},
        description="normalized mode: lowest normalized score kept, per language (a base code "
        "such as zh also covers zh_CN)",
    )
    default_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="normalized mode: threshold of languages missing from `thresholds`; unset "
        "makes a modelled language without a threshold an error",
    )
    lambda_: float = Field(
        # Yishu §2.1.1: λ in 0.2-0.8 by language pair, 0.7 for an English source and Chinese
        # target.
        0.7,
        ge=0,
        le=1,
        description="combined mode: weight of the source side's perplexity",
    )
    source: str | None = Field(
        None, description="combined mode: the source language; the corpus' first when unset"
    )
    max_perplexity: float | None = Field(
        None,
        gt=0,
        description="combined mode: highest combined perplexity kept; unset keeps every pair "
        "(rank with `keep` instead)",
    )

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {lang: t for lang, t in value.items() if not 0 <= t <= 1}
        if bad:
            raise ValueError(f"thresholds must lie in [0, 1] (normalized scores): {bad}")
        return value


class LanguageModelFilter(Filter[LanguageModelConfig]):
    """Score: per-side fluency in [0, 1] (normalized) or the pair's combined perplexity.

    In ``normalized`` mode a side without a model scores NaN and is not checked."""

    name = "lm"
    higher_is_better = True

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        config = self.config
        folder = self.resource(config.lm)
        self.meta = self._meta(folder, config.lm)
        modelled = set(self.meta["langs"])
        self.sides = [i for i, lang in enumerate(langs) if lang in modelled]
        lm = Artifact(folder, self.meta)
        self.paths = {i: lm.member(self.meta["files"][langs[i]]) for i in self.sides}
        if not self.sides:
            raise PluginError(
                f"filter 'lm': the models in {folder} are for {sorted(modelled)}, none of the "
                f"corpus languages {list(langs)}"
            )
        if config.mode == "normalized":
            self.limits = {i: self._threshold(langs[i]) for i in self.sides}
        else:
            self.weights = self._weights(langs, modelled, folder)

    @staticmethod
    def _meta(folder: Path, role: str) -> dict[str, Any]:
        return kenlm_meta(folder, role, "filter 'lm'")

    def _threshold(self, lang: str) -> float:
        config = self.config
        for key in (lang, base_lang(lang)):
            if key in config.thresholds:
                return config.thresholds[key]
        if config.default_threshold is None:
            raise PluginError(
                f"filter 'lm': no threshold for language {lang!r} (thresholds has "
                f"{sorted(config.thresholds)}); add thresholds.{lang} or set default_threshold"
            )
        return config.default_threshold

    def _weights(self, langs: tuple[str, ...], modelled: set[str], folder: Path) -> list[float]:
        config = self.config
        if len(langs) != 2:
            raise PluginError(
                f"filter 'lm': combined mode weighs a source and a target side; the corpus has "
                f"{len(langs)}: {list(langs)}"
            )
        missing = [lang for lang in langs if lang not in modelled]
        if missing:
            raise PluginError(
                f"filter 'lm': combined mode needs a model for both sides; {folder} has none "
                f"for {missing} (train the kenlm step on both languages)"
            )
        source = config.source if config.source is not None else langs[0]
        if source not in langs:
            raise PluginError(
                f"filter 'lm': source {source!r} is not a corpus language ({list(langs)})"
            )
        return [config.lambda_ if lang == source else 1 - config.lambda_ for lang in langs]

    def log10_perplexities(self, batch: Sequence[Pair]) -> np.ndarray:
        """(pairs, sides) log10 perplexity of each side; NaN where a side has no model."""
        from mtcore_plugins.common.lm.ngram import lm_line, log10_perplexity

        values = np.full((len(batch), len(self.langs)), np.nan)
        for side in self.sides:
            model, lang = load_model(self.paths[side]), self.langs[side]
            for row, pair in enumerate(batch):
                values[row, side] = log10_perplexity(model, lm_line(pair[side], lang))
        return values

    def score(self, batch: Sequence[Pair]) -> list[Any]:
        if not batch:
            return []
        config = self.config
        x = self.log10_perplexities(batch)
        if config.mode == "combined":
            ppl = np.power(10.0, x)
            combined = self.weights[0] * ppl[:, 0] + self.weights[1] * ppl[:, 1]
            return [float(v) for v in combined]
        scores = np.full_like(x, np.nan)
        for side in self.sides:
            bounds = self.meta["log10_ppl"][self.langs[side]]
            scores[:, side] = normalize(x[:, side], bounds["min"], bounds["max"])
        return scores.tolist()

    def accept(self, score: Any) -> bool:
        config = self.config
        if config.mode == "combined":
            limit = config.max_perplexity
            return bool(limit is None or score <= limit)
        return all(score[side] >= self.limits[side] for side in self.sides)

    def rank_key(self, scores: Any) -> Any:
        values = np.asarray(scores, dtype=np.float64)
        config = self.config
        if config.mode == "combined":
            return -values
        return values[:, self.sides].min(axis=1)


def normalize(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """``(high - x) / (high - low)`` clipped to [0, 1]: 1 for the most fluent training
    sentence, 0 for the least (see the module docstring for why log perplexity)."""
    if not math.isfinite(high - low) or high <= low:
        return np.where(x <= high, 1.0, 0.0)
    return np.clip((high - x) / (high - low), 0.0, 1.0)

"""A dev n-best as arrays for the tuners: features ``X`` (hypotheses x features), sentence
offsets and BLEU statistics per hypothesis, taken from the ``bleu`` metric plugin (its
segment statistics, summed over a choice of hypotheses, give that choice's corpus BLEU); and
the settings every tuner shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numba
import numpy as np
from pydantic import Field

from mtcore.api import Metric, PluginConfig, PluginError, load_registry
from mtcore.api.engine import NBest

Tokenize = Literal["auto", "13a", "intl", "zh", "ja-mecab", "ko-mecab", "char", "none"]


class TunerConfig(PluginConfig):
    tokenize: Tokenize = Field(
        "auto", description="sacrebleu tokenizer of the BLEU tuned for; auto picks by language"
    )
    lowercase: bool = Field(False, description="case-insensitive BLEU")
    seed: int = Field(1, ge=0, le=2**31 - 1, description="random seed")


@dataclass
class Problem:
    features: list[str]
    X: np.ndarray
    offsets: np.ndarray
    stats: np.ndarray
    metric: Metric

    @property
    def sentences(self) -> int:
        return len(self.offsets) - 1

    def score_rows(self, summed: np.ndarray, sentence: bool = False) -> np.ndarray:
        """The metric's score of each row of summed statistics."""
        return np.asarray(self.metric.score_statistics(summed, sentence=sentence))

    def score_choice(self, rows: np.ndarray) -> float:
        """Corpus BLEU when sentence ``s`` outputs hypothesis ``rows[s]``."""
        return float(self.score_rows(self.stats[rows].sum(axis=0)[None])[0])

    def score_weights(self, w: np.ndarray) -> float:
        """Corpus BLEU of the hypotheses that weights ``w`` pick."""
        return self.score_choice(best_rows(self.X @ w, self.offsets))


@numba.njit(cache=True)
def best_rows(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Index of the highest score of each sentence (the first of equal ones)."""
    out = np.empty(len(offsets) - 1, dtype=np.int64)
    for s in range(len(offsets) - 1):
        best = offsets[s]
        for h in range(offsets[s] + 1, offsets[s + 1]):
            if scores[h] > scores[best]:
                best = h
        out[s] = best
    return out


def bleu_metric(config: TunerConfig) -> Metric:
    """The ``bleu`` metric plugin with the tuner's tokenizer and case setting."""
    settings: dict[str, Any] = {"tokenize": config.tokenize, "lowercase": config.lowercase}
    metric = load_registry().load("metrics", "bleu").from_dict(settings)
    assert isinstance(metric, Metric)
    return metric


def make_problem(
    who: str,
    features: Sequence[str],
    nbest: NBest,
    refs: Sequence[Sequence[str]],
    lang: str,
    config: TunerConfig,
) -> Problem:
    """Arrays of ``nbest``; every hypothesis must carry every feature, every reference stream
    must have one line per sentence."""
    if not features:
        raise PluginError(f"tuner {who!r}: no features to weigh")
    if not refs:
        raise PluginError(f"tuner {who!r}: no references")
    for number, stream in enumerate(refs):
        if len(stream) != len(nbest):
            raise PluginError(
                f"tuner {who!r}: reference stream {number} has {len(stream)} lines for "
                f"{len(nbest)} n-best entries"
            )
    rows: list[list[float]] = []
    offsets = [0]
    for s, hyps in enumerate(nbest):
        if not hyps:
            raise PluginError(f"tuner {who!r}: sentence {s} has no hypotheses")
        for rank, (_, scores) in enumerate(hyps):
            missing = [f for f in features if f not in scores]
            if missing:
                raise PluginError(
                    f"tuner {who!r}: sentence {s} hypothesis {rank} lacks features {missing} "
                    f"(has {sorted(scores)})"
                )
            rows.append([float(scores[f]) for f in features])
        offsets.append(len(rows))
    texts = [text for hyps in nbest for text, _ in hyps]
    of = [s for s, hyps in enumerate(nbest) for _ in hyps]
    metric = bleu_metric(config)
    return Problem(
        list(features),
        np.asarray(rows, dtype=np.float64).reshape(-1, len(features)),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(metric.segment_statistics(texts, refs, lang, of)),
        metric,
    )


def as_weights(features: Sequence[str], vector: np.ndarray) -> dict[str, float]:
    return {f: round(float(w), 6) for f, w in zip(features, vector, strict=True)}

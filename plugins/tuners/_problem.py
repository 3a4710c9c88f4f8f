"""A dev n-best as arrays for the tuners: features ``X`` (hypotheses x features), sentence
offsets and BLEU statistics per hypothesis; and the settings every tuner shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from mtcore.errors import PluginError
from mtcore.plugin import NBest, PluginConfig
from mtcore_plugins.common.bleu import hypothesis_stats

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

    @property
    def sentences(self) -> int:
        return len(self.offsets) - 1


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
    texts = [[text for text, _ in hyps] for hyps in nbest]
    stats = hypothesis_stats(texts, refs, config.tokenize, lang, config.lowercase)
    return Problem(
        list(features),
        np.asarray(rows, dtype=np.float64).reshape(-1, len(features)),
        np.asarray(offsets, dtype=np.int64),
        stats,
    )


def as_weights(features: Sequence[str], vector: np.ndarray) -> dict[str, float]:
    return {f: round(float(w), 6) for f, w in zip(features, vector, strict=True)}

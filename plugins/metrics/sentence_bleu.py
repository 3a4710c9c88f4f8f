"""Sentence BLEU, and the per-segment BLEU statistics that corpus BLEU is summed from.

Rerankers and tuners need BLEU per hypothesis: Xiaomi §3.4 labels RankSVM pairs by the order of
their sentence-level BLEU; MERT (NT5 §5.1, eq. 2) maximizes corpus BLEU over many candidate
selections, which is cheap from per-segment statistics: corpus BLEU of any selection is
:func:`bleu_from_stats` of the sum of the selected rows of :func:`segment_stats`.

Scores equal sacrebleu's own (``sentence_bleu``: exp smoothing, effective order; corpus BLEU
from summed statistics), with the tokenizers of the ``bleu`` metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from mtcore.errors import DataError
from mtcore.metrics import Score
from mtcore.plugin import Metric, PluginConfig
from mtcore_plugins.metrics.bleu import Tokenizer, auto_tokenizer

MAX_ORDER = 4
SmoothMethod = Literal["exp", "floor", "add-k", "none"]


def _bleu(tokenize: str, lang: str, lowercase: bool, smooth: str, effective: bool) -> Any:
    from sacrebleu.metrics import BLEU

    return BLEU(
        tokenize=auto_tokenizer(tokenize, lang),
        lowercase=lowercase,
        smooth_method=smooth,
        effective_order=effective,
        force=True,  # single segments ending in " ." are not a sign of tokenized input
    )


def _check(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if not refs:
        raise DataError("sentence BLEU needs at least one reference stream")
    for i, ref in enumerate(refs):
        if len(ref) != len(hyps):
            raise DataError(
                f"reference stream {i} has {len(ref)} segments but there are {len(hyps)} "
                "hypotheses: each reference stream needs one segment per hypothesis"
            )


def segment_stats(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    lang: str,
    tokenize: str = "auto",
    lowercase: bool = False,
) -> np.ndarray:
    """One row per hypothesis: ``[hyp_len, ref_len, correct_1..4, total_1..4]`` (int64), the
    sufficient statistics of BLEU. ``refs`` is a list of reference streams."""
    return _stats(_bleu(tokenize, lang, lowercase, "exp", False), hyps, refs)


def _stats(metric: Any, hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> np.ndarray:
    _check(hyps, refs)
    if not hyps:
        return np.zeros((0, 2 + 2 * MAX_ORDER), dtype=np.int64)
    # sacrebleu's per-segment statistics (pinned 2.5.1): the same code path as corpus_score.
    rows = metric._extract_corpus_statistics(list(hyps), [list(r) for r in refs])
    return np.asarray(rows, dtype=np.int64)


def bleu_from_stats(
    stats: np.ndarray | Sequence[int],
    smooth_method: SmoothMethod = "exp",
    effective_order: bool = False,
) -> float:
    """BLEU (0-100) from statistics summed over a selection of segments (one row of
    :func:`segment_stats` gives that segment's sentence BLEU)."""
    from sacrebleu.metrics import BLEU

    row = np.asarray(stats, dtype=np.int64)
    if row.shape != (2 + 2 * MAX_ORDER,):
        raise ValueError(f"BLEU statistics have {2 + 2 * MAX_ORDER} numbers, got {row.shape}")
    score = BLEU.compute_bleu(
        correct=[int(x) for x in row[2 : 2 + MAX_ORDER]],
        total=[int(x) for x in row[2 + MAX_ORDER :]],
        sys_len=int(row[0]),
        ref_len=int(row[1]),
        smooth_method=smooth_method,
        effective_order=effective_order,
    )
    return float(score.score)


def sentence_bleu(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    lang: str,
    tokenize: str = "auto",
    lowercase: bool = False,
) -> list[float]:
    """sacrebleu's sentence BLEU of every hypothesis (exp smoothing, effective order)."""
    rows = segment_stats(hyps, refs, lang, tokenize, lowercase)
    return [bleu_from_stats(row, "exp", effective_order=True) for row in rows]


class SentenceBleuConfig(PluginConfig):
    tokenize: Tokenizer = Field(
        "auto", description="sacrebleu tokenizer, as for the bleu metric (auto, wmt, 13a, ...)"
    )
    lowercase: bool = Field(False, description="case-insensitive BLEU")


class SentenceBleuMetric(Metric):
    """The mean sentence BLEU of a corpus; :meth:`segment_scores` gives each segment's."""

    name = "sentence_bleu"
    Config = SentenceBleuConfig
    config: SentenceBleuConfig

    def segment_scores(
        self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str
    ) -> list[float]:
        return sentence_bleu(hyps, refs, lang, self.config.tokenize, self.config.lowercase)

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        metric = _bleu(self.config.tokenize, lang, self.config.lowercase, "exp", True)
        rows = _stats(metric, hyps, refs)  # also tells the metric its reference count
        scores = [bleu_from_stats(row, "exp", effective_order=True) for row in rows]
        mean = sum(scores) / len(scores) if scores else 0.0
        return Score(
            "sentBLEU", round(mean, 4), str(metric.get_signature()), {"segments": len(scores)}
        )

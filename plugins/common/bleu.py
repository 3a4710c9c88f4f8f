"""BLEU over n-best lists: sacrebleu's sufficient statistics of every hypothesis, computed once,
and corpus or sentence BLEU from sums of them, so that a tuner scores a weight vector by adding
rows instead of re-tokenizing text.

A row is sacrebleu's segment statistics: ``[hyp_len, ref_len, correct_1..4, total_1..4]``.
:func:`corpus_bleu` reproduces ``sacrebleu.BLEU().corpus_score`` (``exp`` smoothing) from the
summed rows; :func:`sentence_bleu` reproduces ``sentence_score`` with ``effective_order``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

ORDER = 4
WIDTH = 2 + 2 * ORDER
# sacrebleu's own choice per target language (as the bleu metric's "auto").
AUTO_TOKENIZER = {"ja": "ja-mecab", "zh": "zh", "ko": "ko-mecab"}


def tokenizer_for(tokenize: str, lang: str) -> str:
    base = lang.replace("-", "_").split("_", 1)[0].lower()
    return AUTO_TOKENIZER.get(base, "13a") if tokenize == "auto" else tokenize


def bleu_metric(tokenize: str, lang: str, lowercase: bool, sentence: bool = False) -> Any:
    from sacrebleu.metrics import BLEU

    return BLEU(
        tokenize=tokenizer_for(tokenize, lang),
        lowercase=lowercase,
        effective_order=sentence,
        force=True,  # n-best text is often tokenized: no warnings per call
    )


def hypothesis_stats(
    texts: Sequence[Sequence[str]],
    refs: Sequence[Sequence[str]],
    tokenize: str,
    lang: str,
    lowercase: bool = False,
) -> np.ndarray:
    """(hypotheses, 10) int64 statistics of every hypothesis of sentence ``s`` (``texts[s]``)
    against the references of ``s`` (each stream of ``refs`` has one line per sentence)."""
    metric = bleu_metric(tokenize, lang, lowercase)
    cache = metric._cache_references([list(stream) for stream in refs])
    rows = [
        metric._compute_segment_statistics(metric._preprocess_segment(text), cache[s])
        for s, hyps in enumerate(texts)
        for text in hyps
    ]
    return np.asarray(rows, dtype=np.int64).reshape(-1, WIDTH)


@numba.njit(cache=True)
def corpus_bleu(stats: np.ndarray) -> float:
    """BLEU (0-100) of summed statistics, as sacrebleu's corpus score with exp smoothing."""
    sys_len, ref_len = stats[0], stats[1]
    matched = False
    for n in range(ORDER):
        if stats[2 + n] > 0:
            matched = True
    if not matched:
        return 0.0
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1.0 - ref_len / sys_len) if sys_len > 0 else 0.0
    logs = 0.0
    smooth = 1.0
    for n in range(ORDER):
        correct, total = stats[2 + n], stats[2 + ORDER + n]
        if total == 0:
            return 0.0  # sacrebleu: log(0) for this order and the rest
        if correct == 0:
            smooth *= 2.0
            logs += math.log(100.0 / (smooth * total))
        else:
            logs += math.log(100.0 * correct / total)
    return bp * math.exp(logs / ORDER)


def sentence_bleu(stats: np.ndarray) -> np.ndarray:
    """Sentence BLEU (0-100) of each row, as sacrebleu's sentence score (exp smoothing,
    effective order): the label of pairwise ranking (Xiaomi §3.4)."""
    from sacrebleu.metrics import BLEU

    out = np.empty(len(stats))
    for i, row in enumerate(stats.tolist()):
        out[i] = BLEU.compute_bleu(
            correct=row[2 : 2 + ORDER],
            total=row[2 + ORDER :],
            sys_len=row[0],
            ref_len=row[1],
            smooth_method="exp",
            effective_order=True,
        ).score
    return out


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


def bleu_of_choice(stats: np.ndarray, rows: np.ndarray) -> float:
    """Corpus BLEU when sentence s outputs hypothesis ``rows[s]``."""
    return float(corpus_bleu(stats[rows].sum(axis=0).astype(np.float64)))

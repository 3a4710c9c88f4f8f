"""BLEU from sacrebleu's segment statistics at numba speed, for the tuners' inner loops (MERT
scores every interval of every line search). A row is ``[hyp_len, ref_len, correct_1..4,
total_1..4]``; :func:`corpus_bleus` reproduces ``sacrebleu.BLEU().corpus_score`` (``exp``
smoothing) of each row, to the last bit of ``BLEU.compute_bleu``'s arithmetic."""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def corpus_bleu(stats: np.ndarray) -> float:
    """BLEU (0-100) of one row of summed statistics, as sacrebleu with exp smoothing."""
    sys_len, ref_len = stats[0], stats[1]
    order = (len(stats) - 2) // 2  # the row: lengths, then correct and total n-grams per order
    matched = False
    for n in range(order):
        if stats[2 + n] > 0:
            matched = True
    if not matched:
        return 0.0
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1.0 - ref_len / sys_len) if sys_len > 0 else 0.0
    logs = 0.0
    smooth = 1.0
    for n in range(order):
        correct, total = stats[2 + n], stats[2 + order + n]
        if total == 0:
            return 0.0  # sacrebleu: log(0) for this order and the rest
        if correct == 0:
            smooth *= 2.0
            logs += math.log(100.0 / (smooth * total))
        else:
            logs += math.log(100.0 * correct / total)
    return bp * math.exp(logs / order)


@numba.njit(cache=True)
def corpus_bleus(rows: np.ndarray) -> np.ndarray:
    """:func:`corpus_bleu` of every row."""
    out = np.empty(len(rows))
    for i in range(len(rows)):
        out[i] = corpus_bleu(rows[i])
    return out

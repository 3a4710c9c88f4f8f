"""Minimum error rate training (Och, 2003) as NT5 §5.1 uses it: weights ``w`` in [0, 1]^J
(eq. 2) chosen to maximize the corpus BLEU of the hypotheses that maximize ``sum_j w_j P_j``
(eq. 1) on a dev n-best.

Och's exact line search: along a direction ``d`` from ``w`` every hypothesis' score is a line
in the step ``g``, ``w.f + g d.f``; the best hypothesis of a sentence changes only where its
upper envelope has a corner, so corpus BLEU is piecewise constant in ``g`` with at most one
break per corner. Sweeping the corners of every sentence in order finds the best interval
exactly; the step lands in its middle. Each iteration tries every coordinate axis and
``random_directions`` random directions from the current point, moves along the best, and stops
when BLEU no longer improves; ``restarts`` random starting points (the first is all ones) guard
against local optima.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
from pydantic import Field, model_validator

from mtcore.api import Tuner
from mtcore.api.engine import NBest
from mtcore_plugins.tuners._problem import Problem, TunerConfig, as_weights, make_problem


class MertConfig(TunerConfig):
    restarts: int = Field(20, ge=1, le=10_000, description="starting points (first: all ones)")
    iterations: int = Field(50, ge=1, le=10_000, description="line searches per start, at most")
    random_directions: int = Field(
        2, ge=0, le=1000, description="random directions tried per iteration besides the axes"
    )
    low: float = Field(0.0, ge=-1000, le=1000, description="lowest weight (NT5 eq. 2: 0)")
    high: float = Field(1.0, ge=-1000, le=1000, description="highest weight (NT5 eq. 2: 1)")
    min_gain: float = Field(1e-6, ge=0, le=100, description="BLEU gain below which a start stops")

    @model_validator(mode="after")
    def _bounds(self) -> MertConfig:
        if self.low >= self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        return self


class MertTuner(Tuner[MertConfig]):
    """Weights in [low, high]^J maximizing dev corpus BLEU, by Och's line search."""

    name = "mert"

    def fit(
        self, features: Sequence[str], nbest: NBest, refs: Sequence[Sequence[str]], lang: str
    ) -> dict[str, float]:
        config = self.config
        problem = make_problem(self.name, features, nbest, refs, lang, config)
        weights, self.bleu = optimize(problem, config)
        return as_weights(problem.features, weights)


def optimize(problem: Problem, config: MertConfig) -> tuple[np.ndarray, float]:
    """(best weights, their dev BLEU) over every restart."""
    rng = np.random.default_rng(config.seed)
    dims = problem.X.shape[1]
    best_w, best_bleu = np.full(dims, config.high), -1.0
    for start in range(config.restarts):
        w = np.full(dims, config.high) if start == 0 else rng.uniform(config.low, config.high, dims)
        w, bleu = climb(problem, w, config, rng)
        if bleu > best_bleu + 1e-12:
            best_w, best_bleu = w, bleu
    return best_w, best_bleu


def climb(
    problem: Problem, w: np.ndarray, config: MertConfig, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Line searches from ``w`` until BLEU stops improving."""
    dims = len(w)
    stats = problem.stats.astype(np.float64)
    current = score_at(problem, w)
    for _ in range(config.iterations):
        directions = [np.eye(dims)[j] for j in range(dims)]
        for _ in range(config.random_directions):
            d = rng.standard_normal(dims)
            directions.append(d / np.linalg.norm(d))
        found, step, where = current, 0.0, directions[0]
        for d in directions:
            low, high = step_bounds(w, d, config.low, config.high)
            if high - low <= 1e-12:
                continue
            bleu, g = line_search(problem, problem.X @ w, problem.X @ d, stats, low, high)
            if bleu > found:
                found, step, where = bleu, g, d
        if found <= current + config.min_gain:
            break
        w = np.clip(w + step * where, config.low, config.high)
        current = score_at(problem, w)
    return w, current


def score_at(problem: Problem, w: np.ndarray) -> float:
    return problem.score_weights(w)


def step_bounds(w: np.ndarray, d: np.ndarray, low: float, high: float) -> tuple[float, float]:
    """The range of ``g`` keeping ``w + g d`` inside [low, high]^J."""
    lo, hi = -np.inf, np.inf
    for wj, dj in zip(w, d, strict=True):
        if dj > 1e-12:
            lo, hi = max(lo, (low - wj) / dj), min(hi, (high - wj) / dj)
        elif dj < -1e-12:
            lo, hi = max(lo, (high - wj) / dj), min(hi, (low - wj) / dj)
    return float(lo), float(hi)


def line_search(
    problem: Problem, a: np.ndarray, b: np.ndarray, stats: np.ndarray, lo: float, hi: float
) -> tuple[float, float]:
    """(best corpus BLEU, the middle of its interval) over ``g`` in [lo, hi], hypothesis h
    scoring ``a[h] + g * b[h]``: the metric scores the summed statistics of every interval."""
    summed, starts = intervals(a, b, problem.offsets, stats, lo, hi)
    scores = problem.score_rows(summed)
    best = int(np.argmax(scores))  # the first of equal ones, the leftmost interval
    right = starts[best + 1] if best + 1 < len(starts) else hi
    return float(scores[best]), 0.5 * (starts[best] + right)


@numba.njit(cache=True)
def intervals(
    a: np.ndarray, b: np.ndarray, offsets: np.ndarray, stats: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """(summed statistics of the chosen hypotheses, start) of each interval of ``g`` in
    [lo, hi] over which no sentence's best hypothesis changes, left to right."""
    count, width = len(a), stats.shape[1]
    at = np.empty(count)
    delta = np.zeros((count, width))
    events = 0
    base = np.zeros(width)
    for s in range(len(offsets) - 1):
        start, end = offsets[s], offsets[s + 1]
        # The best at lo; of equal ones the steepest, which stays best to the right.
        cur = start
        for h in range(start + 1, end):
            v, c = a[h] + lo * b[h], a[cur] + lo * b[cur]
            if v > c or (v == c and b[h] > b[cur]):
                cur = h
        base += stats[cur]
        g = lo
        while True:  # walk the upper envelope: each corner hands over to a steeper line
            nxt, gx = -1, hi
            for h in range(start, end):
                if b[h] > b[cur]:
                    x = (a[cur] - a[h]) / (b[h] - b[cur])
                    if x < gx or (x == gx and nxt >= 0 and b[h] > b[nxt]):
                        nxt, gx = h, x
            if nxt < 0:
                break
            gx = max(gx, g)
            at[events] = gx
            delta[events] = stats[nxt] - stats[cur]
            events += 1
            cur, g = nxt, gx
    order = np.argsort(at[:events], kind="mergesort")
    summed = np.empty((events + 1, width))
    starts = np.empty(events + 1)
    summed[0], starts[0] = base, lo
    current = base.copy()
    n, i = 1, 0
    while i < events:
        g = at[order[i]]
        while i < events and at[order[i]] == g:
            current += delta[order[i]]
            i += 1
        summed[n], starts[n] = current, g
        n += 1
    return summed[:n], starts[:n]

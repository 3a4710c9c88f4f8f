"""Pairwise ranking SVM (Xiaomi §3.4, after Joachims 2006 and Shen et al. 2004): every pair of
hypotheses of a dev sentence whose sentence BLEU differs becomes one example, the difference of
their feature vectors, labelled by which of the two has the higher sentence BLEU ("we are only
interested in whether the relative distance is positive or negative"); scikit-learn's
``LinearSVC`` (the paper's footnote 7) separates them through the origin and its coefficients
are the weights.

Features are scaled to unit standard deviation before training (a word count and a
log-probability differ by orders of magnitude) and the weights scaled back, then divided by
their largest magnitude: only the direction matters to the ranking.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from mtcore.api import PluginError, Tuner
from mtcore.api.engine import NBest
from mtcore_plugins.tuners._problem import Problem, TunerConfig, as_weights, make_problem


class RankSvmConfig(TunerConfig):
    C: float = Field(1.0, gt=0, le=1e6, description="LinearSVC regularization (larger: less)")
    min_difference: float = Field(
        0.0, ge=0, le=100, description="sentence-BLEU gap below which a pair is not used"
    )
    max_pairs: int = Field(
        0, ge=0, le=1_000_000, description="pairs sampled per sentence; 0 uses every pair"
    )
    max_iter: int = Field(10_000, ge=100, le=10_000_000, description="LinearSVC iterations")


class RankSvmTuner(Tuner[RankSvmConfig]):
    """Weights from a linear SVM on hypothesis pairs ordered by sentence BLEU."""

    name = "ranksvm"

    def fit(
        self, features: Sequence[str], nbest: NBest, refs: Sequence[Sequence[str]], lang: str
    ) -> dict[str, float]:
        from sklearn.svm import LinearSVC

        config = self.config
        problem = make_problem(self.name, features, nbest, refs, lang, config)
        scale = problem.X.std(axis=0)
        scale[scale == 0] = 1.0
        diffs, labels = pairs(problem, config, np.random.default_rng(config.seed))
        if len(set(labels.tolist())) < 2:
            raise PluginError(
                f"tuner {self.name!r}: no two hypotheses of any dev sentence differ in sentence "
                "BLEU by more than min_difference; nothing to learn from"
            )
        svm = LinearSVC(
            C=config.C, fit_intercept=False, max_iter=config.max_iter, random_state=config.seed
        )
        svm.fit(diffs / scale, labels)
        weights = svm.coef_[0] / scale
        top = float(np.abs(weights).max())
        return as_weights(problem.features, weights / top if top > 0 else weights)


def pairs(
    problem: Problem, config: RankSvmConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Feature differences of hypothesis pairs and +1/-1 labels, half of them flipped so that
    both classes are present."""
    bleu = problem.score_rows(problem.stats, sentence=True)
    rows: list[tuple[int, int]] = []
    for s in range(problem.sentences):
        start, end = int(problem.offsets[s]), int(problem.offsets[s + 1])
        found = [
            (i, j)
            for i in range(start, end)
            for j in range(i + 1, end)
            if abs(bleu[i] - bleu[j]) > config.min_difference
        ]
        if config.max_pairs and len(found) > config.max_pairs:
            keep = rng.choice(len(found), config.max_pairs, replace=False)
            found = [found[int(k)] for k in np.sort(keep)]
        rows.extend(found)
    if not rows:
        return np.zeros((0, problem.X.shape[1])), np.zeros(0)
    first = np.array([i for i, _ in rows])
    second = np.array([j for _, j in rows])
    diffs = problem.X[first] - problem.X[second]
    labels = np.where(bleu[first] > bleu[second], 1.0, -1.0)
    flip = np.arange(len(rows)) % 2 == 1
    diffs[flip] *= -1
    labels[flip] *= -1
    return diffs, labels

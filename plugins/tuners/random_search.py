"""Random search, the baseline: fairseq's noisy-channel reranker tunes its weights this way
(``examples/noisychannel/rerank_tune.py``: each weight drawn uniformly between a lower and an
upper bound, ``--num-trials`` draws, the best dev BLEU kept). The first trial is all ones, the
untuned sum of the features."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field, model_validator

from mtcore.api import Tuner
from mtcore.api.engine import NBest
from mtcore_plugins.tuners._problem import TunerConfig, as_weights, make_problem


class RandomSearchConfig(TunerConfig):
    trials: int = Field(1000, ge=1, le=10_000_000, description="weight vectors drawn")
    low: float = Field(0.0, ge=-1000, le=1000, description="lowest weight drawn")
    high: float = Field(1.0, ge=-1000, le=1000, description="highest weight drawn")

    @model_validator(mode="after")
    def _bounds(self) -> RandomSearchConfig:
        if self.low >= self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        return self


class RandomSearchTuner(Tuner[RandomSearchConfig]):
    """The best of ``trials`` uniform random weight vectors by dev corpus BLEU."""

    name = "random_search"

    def fit(
        self, features: Sequence[str], nbest: NBest, refs: Sequence[Sequence[str]], lang: str
    ) -> dict[str, float]:
        config = self.config
        problem = make_problem(self.name, features, nbest, refs, lang, config)
        rng = np.random.default_rng(config.seed)
        dims = problem.X.shape[1]
        best_w, self.bleu = np.ones(dims), -1.0
        for trial in range(config.trials):
            w = np.ones(dims) if trial == 0 else rng.uniform(config.low, config.high, dims)
            bleu = problem.score_weights(w)
            if bleu > self.bleu:
                best_w, self.bleu = w, bleu
        return as_weights(problem.features, best_w)

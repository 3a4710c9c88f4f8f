"""CometKiwi (Unbabel/wmt22-cometkiwi-da; Rei et al. 2022) as a rerank feature: the
quality-estimation score of each (source, hypothesis), no reference needed, so it ranks the
n-best of a test set as well as a dev set's.

The model is loaded as data by :mod:`~mtcore_plugins.common.neural_metrics.comet`: ``model`` names
the rerank step's input connected to a fetched CometKiwi model, or a local directory
(``hparams.yaml`` + ``checkpoints/model.ckpt``) with its encoder (``encoder/`` or ``encoder:``). An
n-best list repeats hypotheses (and always its source): each distinct (source, hypothesis) is scored
once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mtcore.api import Scorer
from mtcore_plugins.common.neural_metrics.comet import (
    LICENCES,
    CometModelConfig,
    CometRunner,
    model_files,
)

QE_CLASSES = ("unified_metric", "referenceless_regression_metric")


class CometKiwiScorer(Scorer[CometModelConfig]):
    """Score: CometKiwi's estimate of the hypothesis' quality (about 0-1, higher is better)."""

    name = "cometkiwi"
    licences = LICENCES

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        super().setup(src, tgt, resources)
        who = f"scorer {self.name!r}"
        files = model_files(self.config.model, self.resources, who)
        self.runner = CometRunner.open(files, self.config, QE_CLASSES, who)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return self.runner.score([(source, hyp, None) for source, hyp in pairs])

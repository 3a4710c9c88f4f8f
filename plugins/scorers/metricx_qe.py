"""MetricX-QE as a rerank feature: the quality a released MetricX-24 model (hybrid, run without a
reference; google/metricx-24-hybrid-*-v2p6) estimates for each (source, hypothesis) pair.

The feature is MetricX's own number, error points in [0, 25]: LOWER IS BETTER. It is not
negated; the tuner learns its weight, and so its sign, like any feature's. The input is the
released ``metricx24/predict.py``'s QE input, ``"source: " + source + " candidate: " +
hypothesis``, tokenized as it tokenizes (see
:mod:`mtcore_plugins.common.neural_metrics.metricx_config`).

``model`` names the rerank step's input connected to a ``models`` entry fetched with ``metric:
metricx``, or a local directory; the model loads in :meth:`setup`, once per process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mtcore.api import Scorer
from mtcore_plugins.common.neural_metrics.metricx_config import MetricXConfig, format_input


class MetricXQEScorer(Scorer[MetricXConfig]):
    """Score: MetricX-QE error points of the hypothesis given its source (0-25, lower better)."""

    name = "metricx_qe"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        super().setup(src, tgt, resources)
        from mtcore_plugins.common.neural_metrics.metricx_model import load_predictor

        self.predictor = load_predictor(self.config, self.resources, f"scorer {self.name!r}")

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        version = self.config.version
        texts = [format_input(source, hyp, None, version) for source, hyp in pairs]
        return self.predictor.predict(texts)

"""MetricX-24 (Juraska et al., WMT 2024, "MetricX-24: The Google Submission to the WMT 2024
Metrics Shared Task"): a learned metric predicting MQM-like error points in [0, 25], lower is
better, from a local copy of a released model (google/metricx-24-hybrid-{large,xl,xxl}-v2p6).

The 24 models are hybrid: one model scores with the reference (``metricx``: source, hypothesis
and reference) or without it (``metricx_qe``, quality estimation: source and hypothesis). They
are two metrics because whether a metric reads the references is a class fact
(``needs_reference``) the evaluate step reads. Both read the source. The input strings, the
truncation and the removal of ``</s>`` are the released ``metricx24/predict.py``'s; the model is
its ``models.py``'s (:mod:`mtcore_plugins.common.neural_metrics.metricx_model`); ``version: 23``
gives MetricX-23's input format for a MetricX-23 model.

``model`` names the evaluate step's input connected to a ``models`` entry fetched with
``metric: metricx`` (its mT5 tokenizer comes with it), or a local directory. The model loads in
the first call that scores, so the metric travels to the evaluate step's worker process before
any weight is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from mtcore.api import DataError, Metric, PluginError, Score
from mtcore_plugins.common.neural_metrics.metricx_config import (
    MetricXConfig,
    describe,
    format_input,
)
from mtcore_plugins.common.neural_metrics.models import over_references

if TYPE_CHECKING:
    from mtcore_plugins.common.neural_metrics.metricx_model import MetricXPredictor


class MetricXBase(Metric[MetricXConfig]):
    """System MetricX: the mean of the segment scores, each the mean over the references."""

    needs_source: ClassVar[bool] = True
    heavy: ClassVar[bool] = True
    higher_is_better: ClassVar[bool] = False
    qe: ClassVar[bool] = False

    def __init__(self, config: MetricXConfig | None = None) -> None:
        super().__init__(config)
        self._predictor: MetricXPredictor | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Picklable at any time: a loaded model stays in the process that loaded it."""
        return {**self.__dict__, "_predictor": None}

    def predictor(self) -> MetricXPredictor:
        if self._predictor is None:
            from mtcore_plugins.common.neural_metrics.metricx_model import load_predictor

            resources = getattr(self, "resources", {})
            self._predictor = load_predictor(self.config, resources, f"metric {self.name!r}")
        return self._predictor

    def per_reference(
        self, hyps: Sequence[str], refs: Sequence[Sequence[str]], sources: Sequence[str] | None
    ) -> list[list[float]]:
        """The segment scores against each reference stream (one list, no reference, for QE);
        every input is scored once however often it recurs."""
        if sources is None:
            raise PluginError(
                f"metric {self.name!r} reads the source of each hypothesis: give the sources "
                "(the evaluate step takes them from its reference corpus; set its `src`)"
            )
        if len(sources) != len(hyps):
            raise DataError(f"{len(sources)} source segments for {len(hyps)} hypotheses")
        version = self.config.version
        if self.qe:
            streams: Sequence[Sequence[str] | None] = [None]
        elif not refs:
            raise PluginError(f"metric {self.name!r} needs a reference; metricx_qe needs none")
        else:
            streams = refs
        texts = []
        for ref in streams:
            if ref is not None and len(ref) != len(hyps):
                raise DataError(f"a reference of {len(ref)} segments for {len(hyps)} hypotheses")
            for i, hyp in enumerate(hyps):
                texts.append(
                    format_input(sources[i], hyp, None if ref is None else ref[i], version)
                )
        scores = self.predictor().predict(texts)
        n = len(hyps)
        return [scores[k * n : (k + 1) * n] for k in range(len(streams))]

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        return over_references(self.per_reference(hyps, refs, sources))[0]

    def corpus_score(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> Score:
        if not hyps:
            raise DataError(f"metric {self.name!r}: no hypotheses to score")
        segments, details = over_references(self.per_reference(hyps, refs, sources))
        details["model_dir"] = str(self.predictor().model_dir)
        name = f"MetricX-{self.config.version}" + ("-QE" if self.qe else "")
        nrefs = 0 if self.qe else len(refs)
        return Score(name, round(sum(segments) / len(segments), 4), self.signature(nrefs), details)

    def signature(self, nrefs: int) -> str:
        """What reproduces the number: the model and its revision (``mtcore-model.json``'s, else
        the directory's name and the weights' sha256), the mode and the settings that move it."""
        config = self.config
        model_id, revision = describe(self.predictor().model_dir)
        mode = "qe" if self.qe else "ref"
        return (
            f"nrefs:{nrefs}|model:{model_id}|rev:{revision}|mode:{mode}|bs:{config.batch_size}"
            f"|prec:{config.precision}|len:{config.input_length()}|version:{config.version}"
        )


class MetricXMetric(MetricXBase):
    """MetricX with the reference: ``source: … candidate: … reference: …``."""

    name = "metricx"


class MetricXQEMetric(MetricXBase):
    """MetricX without a reference (QE): ``source: … candidate: …``; the references are not
    read."""

    name = "metricx_qe"
    needs_reference: ClassVar[bool] = False
    qe: ClassVar[bool] = True

"""The COMET family (unbabel-comet, loaded as data by
:mod:`~mtcore_plugins.common.neural_metrics.comet`): ``comet`` (reference-based; COMET-22 with
Unbabel/wmt22-comet-da, the WMT22 ``COMET-A`` column), ``cometkiwi`` (quality estimation from source
and hypothesis: Unbabel/wmt22-cometkiwi-da) and ``xcomet`` (Unbabel/XCOMET-XL; with references, or
``reference: false`` for its QE mode).

mtcore never downloads a model: ``model`` names the evaluate step's input connected to a
fetched model, or a local directory (``hparams.yaml`` + ``checkpoints/model.ckpt``, as
``comet.download_model`` leaves it) or its ``model.ckpt``. A path is checked when the recipe
is validated, so a run does not train for hours before finding it missing.

Every segment needs its source: the ``evaluate`` step passes the source column of its reference
corpus (``sources=``). Scores are on COMET's own scale (about 0-1, not x100); the corpus score
is the mean of the segment scores, each the mean over the references when there are several.
The signature names the model, its revision (recorded with it, else the sha256 of model.ckpt),
batch size and precision, which can move scores slightly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any, ClassVar, TypeVar

from pydantic import Field

from mtcore.api import DataError, Metric, PluginError, Score
from mtcore_plugins.common.neural_metrics.comet import (
    LICENCES,
    PACKAGE,
    CometModelConfig,
    CometRunner,
    ModelFiles,
    Triple,
    model_files,
)
from mtcore_plugins.common.neural_metrics.models import over_references


class CometConfig(CometModelConfig):
    """Settings of ``comet`` and ``cometkiwi``."""


class XCometConfig(CometModelConfig):
    reference: bool = Field(
        True, description="score with the references (false: xCOMET's quality-estimation mode)"
    )


SettingsT = TypeVar("SettingsT", bound=CometModelConfig)


class CometFamilyMetric(Metric[SettingsT]):
    """Base of the three: resolves and loads the model on first use (in the evaluate step's
    worker process: the instance is pickled before that), scores segments, signs the score."""

    needs_source: ClassVar[bool] = True
    heavy: ClassVar[bool] = True
    licences = LICENCES
    label: ClassVar[str] = "COMET"
    classes: ClassVar[tuple[str, ...]] = ()
    _runner: CometRunner | None = None
    _files: ModelFiles | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_runner", None)  # a loaded model is not shipped to a worker
        return state

    def uses_references(self) -> bool:
        return type(self).needs_reference

    def runner(self) -> CometRunner:
        if self._runner is None:
            config = self.config
            resources: Mapping[str, Path] = getattr(self, "resources", {})
            self._files = model_files(config.model, resources, self.who)
            self._runner = CometRunner.open(self._files, config, self.classes, self.who)
        return self._runner

    @property
    def who(self) -> str:
        return f"metric {self.name!r}"

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        return over_references(self.scores_per_reference(hyps, refs, sources))[0]

    def scores_per_reference(
        self, hyps: Sequence[str], refs: Sequence[Sequence[str]], sources: Sequence[str] | None
    ) -> list[list[float]]:
        """Segment scores against each reference stream (one list without references), all
        streams scored in one call, so that a sentence in several is encoded once."""
        streams = self._checked(hyps, refs, sources)
        assert sources is not None
        triples: list[Triple] = []
        for stream in streams:
            triples.extend(zip(sources, hyps, stream, strict=True))
        scores = self.runner().score(triples) if triples else []
        n = len(hyps)
        return [scores[i * n : (i + 1) * n] for i in range(len(streams))]

    def _checked(
        self, hyps: Sequence[str], refs: Sequence[Sequence[str]], sources: Sequence[str] | None
    ) -> list[Sequence[str | None]]:
        reading = "(source, hypothesis, reference) triples" if self.uses_references() else (
            "(source, hypothesis) pairs"
        )  # fmt: skip
        if sources is None:
            raise PluginError(
                f"the {self.name} metric scores {reading}: give the sources (the evaluate step "
                "takes them from its reference corpus)"
            )
        if len(sources) != len(hyps):
            raise DataError(
                f"{len(sources)} source segments for {len(hyps)} hypotheses: {self.label} needs "
                "one source per hypothesis"
            )
        if not self.uses_references():
            return [[None] * len(hyps)]
        if not refs:
            raise PluginError(f"the {self.name} metric needs at least one reference stream")
        for i, stream in enumerate(refs):
            if len(stream) != len(hyps):
                raise DataError(
                    f"reference {i + 1} has {len(stream)} lines for {len(hyps)} hypotheses"
                )
        return list(refs)

    def corpus_score(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> Score:
        if not hyps:
            raise DataError(f"{self.label} of no hypotheses: the hypothesis file is empty")
        segments, details = over_references(self.scores_per_reference(hyps, refs, sources))
        files = self._files
        assert files is not None
        details.update(model=files.id, checkpoint=str(files.checkpoint))
        return Score(self.label, round(fmean(segments), 4), self.signature(len(refs)), details)

    def signature(self, nrefs: int) -> str:
        """``nrefs:1|model:wmt22-comet-da|rev:…|bs:16|prec:fp32|version:2.2.7``."""
        config = self.config
        files = self._files or model_files(config.model, getattr(self, "resources", {}), self.who)
        used = nrefs if self.uses_references() else 0
        return (
            f"nrefs:{used}|model:{files.id}|rev:{files.pinned_revision()}|bs:{config.batch_size}"
            f"|prec:{config.precision}|version:{comet_version()}"
        )


class CometMetric(CometFamilyMetric[CometConfig]):
    """Reference-based COMET (COMET-22 with wmt22-comet-da): each distinct sentence is embedded
    once, so several systems, n-best lists and MBR cost one encoder pass per sentence."""

    name = "comet"
    classes = ("regression_metric",)


class CometKiwiMetric(CometFamilyMetric[CometConfig]):
    """CometKiwi quality estimation: scores (source, hypothesis); references are ignored."""

    name = "cometkiwi"
    label = "CometKiwi"
    needs_reference: ClassVar[bool] = False
    classes = ("unified_metric", "referenceless_regression_metric")


class XCometMetric(CometFamilyMetric[XCometConfig]):
    """xCOMET: regression scores of (hyp, src), (hyp, ref) and (hyp, src, ref) mixed with an
    MQM-like score from its detected error spans; ``reference: false`` scores (hyp, src)."""

    name = "xcomet"
    label = "xCOMET"
    classes = ("xcomet_metric",)

    def uses_references(self) -> bool:
        return self.config.reference


def comet_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"

"""COMET (Rei et al. 2020) from a local checkpoint, when ``unbabel-comet`` is installed.

mtcore never downloads a model: ``model`` is a local ``model.ckpt`` or a model directory holding
``checkpoints/model.ckpt`` (as ``comet.download_model`` leaves it, e.g. wmt22-comet-da, the
model behind the WMT22 ``COMET-A`` column). Both the package and the path are checked when the
recipe is validated, so a run does not train for hours before finding either missing.

COMET scores a segment from its source, hypothesis and reference: the ``evaluate`` step passes
the source column of its reference corpus (``corpus_score(..., sources=...)``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from mtcore.api import NOT_IDENTITY, DataError, Metric, PluginConfig, PluginError, Score

PACKAGE = "unbabel-comet"
INSTALL = f"pip install {PACKAGE}"


def comet_installed() -> bool:
    return importlib.util.find_spec("comet") is not None


def checkpoint_file(model: str) -> Path:
    """``model`` itself when it is a file, else ``model/checkpoints/model.ckpt``."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    candidate = path / "checkpoints" / "model.ckpt"
    if candidate.is_file():
        return candidate
    if path.is_dir():
        raise ValueError(
            f"{path} is a directory without checkpoints/model.ckpt: give the model.ckpt file or "
            "the directory comet.download_model made"
        )
    raise ValueError(f"COMET model {path} does not exist: give a local model.ckpt or its directory")


def model_name(checkpoint: Path) -> str:
    """``wmt22-comet-da`` for ``.../wmt22-comet-da/checkpoints/model.ckpt``."""
    if checkpoint.parent.name == "checkpoints" and checkpoint.parent.parent.name:
        return checkpoint.parent.parent.name
    return checkpoint.stem


class CometConfig(PluginConfig):
    model: str = Field(
        ...,
        min_length=1,
        description="local COMET checkpoint: a model.ckpt file or a directory with "
        "checkpoints/model.ckpt (nothing is downloaded)",
    )
    batch_size: int = Field(
        16, ge=1, le=1024, description="segments per batch", json_schema_extra=NOT_IDENTITY
    )
    gpus: int = Field(
        0, ge=0, le=16, description="GPUs to use (0: CPU)", json_schema_extra=NOT_IDENTITY
    )

    @field_validator("model")
    @classmethod
    def _usable(cls, value: str) -> str:
        checkpoint_file(value)
        if not comet_installed():
            raise ValueError(
                f"the comet metric needs the {PACKAGE} package, which is not installed: {INSTALL}"
            )
        return value


class CometMetric(Metric[CometConfig]):
    """System COMET: the mean of the segment scores (over references, when there are several)."""

    name = "comet"
    needs_source: ClassVar[bool] = True

    def corpus_score(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> Score:
        if sources is None:
            raise PluginError(
                "the comet metric scores (source, hypothesis, reference) triples: give the "
                "sources (the evaluate step takes them from its reference corpus)"
            )
        if len(sources) != len(hyps):
            raise DataError(
                f"{len(sources)} source segments for {len(hyps)} hypotheses: COMET needs one "
                "source per hypothesis"
            )
        if not comet_installed():
            raise PluginError(
                f"the comet metric needs {PACKAGE}, which is not installed: {INSTALL}"
            )
        from comet import load_from_checkpoint

        path = checkpoint_file(self.config.model)
        model = load_from_checkpoint(str(path))
        per_ref = []
        for ref in refs:
            data = [
                {"src": s, "mt": h, "ref": r} for s, h, r in zip(sources, hyps, ref, strict=True)
            ]
            out = model.predict(
                data, batch_size=self.config.batch_size, gpus=self.config.gpus, progress_bar=False
            )
            per_ref.append(float(out.system_score))
        version = _comet_version()
        signature = f"nrefs:{len(refs)}|model:{model_name(path)}|version:{version}"
        details = {"per_reference": [round(s, 4) for s in per_ref], "checkpoint": str(path)}
        return Score("COMET", round(sum(per_ref) / len(per_ref), 4), signature, details)


def _comet_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"

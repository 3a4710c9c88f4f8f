"""What ``fetch_model`` fetches for a neural metric's model (``metric: comet`` or ``metric:
metricx`` on a ``models`` entry), and the layout the metric plugins read.

A COMET repository (``Unbabel/wmt22-comet-da``, ``Unbabel/wmt22-cometkiwi-da``,
``Unbabel/XCOMET-XL``) holds ``hparams.yaml`` and ``checkpoints/model.ckpt``; its encoder's
tokenizer and configuration live in another repository, the one ``hparams.yaml`` names as
``pretrained_model`` (``xlm-roberta-large``, ``microsoft/infoxlm-large``,
``facebook/xlm-roberta-xl``): ``encoder`` names it otherwise. A MetricX repository
(``google/metricx-24-hybrid-large-v2p6``) holds an mT5 ``config.json`` and weights; its tokenizer
is mT5's (``google/mt5-large``: every mT5 size shares one SentencePiece model). The artifact::

    hparams.yaml, checkpoints/model.ckpt, encoder/{config.json, sentencepiece.bpe.model}   comet
    config.json, model.safetensors, tokenizer/spiece.model                               metricx
    mtcore-model.json   {"id", "revision", "metric"}: what the metrics' signatures name

Everything is read as data: ``hparams.yaml`` with ``yaml.safe_load`` and only known model
classes, ``config.json`` without ``auto_map``, pickled weights only through the safe loader.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import yaml

from mtcore.api import DataError

COMET_CLASSES = (
    "regression_metric",
    "referenceless_regression_metric",
    "unified_metric",
    "xcomet_metric",
)
HPARAMS = "hparams.yaml"
CHECKPOINT = "checkpoints/model.ckpt"
ENCODER_DIR = "encoder"
ENCODER_FILES = ("config.json", "sentencepiece.bpe.model")
TOKENIZER_DIR = "tokenizer"
TOKENIZER_FILES = ("spiece.model",)
DESCRIPTION = "mtcore-model.json"
SMALL = 16 << 20

Fetch = Callable[[str], Path]


def read_hparams(path: Path, where: str) -> dict[str, Any]:
    """A COMET ``hparams.yaml`` as plain data, its model class checked."""
    if path.stat().st_size > SMALL:
        raise DataError(f"{where}: {HPARAMS} is over {SMALL} bytes; not a COMET model's")
    try:
        hparams = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DataError(f"{where}: {HPARAMS} is not plain YAML ({exc})") from None
    if not isinstance(hparams, dict):
        raise DataError(f"{where}: {HPARAMS} is not a mapping")
    kind = hparams.get("class_identifier")
    if kind not in COMET_CLASSES:
        raise DataError(
            f"{where}: {HPARAMS} has class_identifier {kind!r}; valid: {', '.join(COMET_CLASSES)}"
        )
    return hparams


def check_mt5(path: Path, where: str) -> dict[str, Any]:
    if path.stat().st_size > SMALL:
        raise DataError(f"{where}: config.json is over {SMALL} bytes")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{where}: config.json is not JSON: {exc}") from None
    if not isinstance(config, dict) or "auto_map" in config:
        raise DataError(f"{where}: config.json has an auto_map (the repository's own code)")
    if config.get("model_type") not in ("mt5", "t5"):
        raise DataError(
            f"{where}: a MetricX model is an mT5 (model_type mt5), not {config.get('model_type')!r}"
        )
    return config


def default_encoder(metric: str, main: Fetch, where: str) -> str:
    """The repository of the encoder's tokenizer when ``encoder`` is not given."""
    if metric == "comet":
        named = read_hparams(main(HPARAMS), where).get("pretrained_model")
        if not isinstance(named, str) or not named:
            raise DataError(f"{where}: {HPARAMS} names no pretrained_model; set encoder")
        return f"hf:{named}"
    return "hf:google/mt5-large"


def plan(
    metric: str, main: Fetch, encoder: Fetch, weights: str, where: str
) -> list[tuple[str, Path]]:
    """(artifact path, fetched file) of every file, checked as data on the way."""
    if metric == "comet":
        read_hparams(main(HPARAMS), where)
        files = [(HPARAMS, main(HPARAMS)), (CHECKPOINT, main(CHECKPOINT))]
        for name in ENCODER_FILES:
            fetched = encoder(name)
            if name == "config.json":
                _check_encoder_config(fetched, where)
            files.append((f"{ENCODER_DIR}/{name}", fetched))
        return files
    check_mt5(main("config.json"), where)
    files = [("config.json", main("config.json")), (weights, main(weights))]
    files += [(f"{TOKENIZER_DIR}/{name}", encoder(name)) for name in TOKENIZER_FILES]
    return files


def _check_encoder_config(path: Path, where: str) -> None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{where}: the encoder's config.json is not JSON: {exc}") from None
    if not isinstance(config, dict) or "auto_map" in config:
        raise DataError(f"{where}: the encoder's config.json has an auto_map (its own code)")


def describe(out: Path, metric: str, model_id: str, revision: str | None) -> None:
    (out / DESCRIPTION).write_text(
        json.dumps({"id": model_id.removeprefix("hf:"), "revision": revision, "metric": metric})
        + "\n"
    )


def over_references(streams: Sequence[Sequence[float]]) -> tuple[list[float], dict[str, Any]]:
    """A neural metric's segment scores from its scores against each reference stream (one
    stream without references): each segment's mean over the streams, and the details a
    ``Score`` keeps (the segments; with several streams, each stream's own mean)."""
    segments = [fmean(column) for column in zip(*streams, strict=True)]
    details: dict[str, Any] = {"segments": segments}
    if len(streams) > 1:
        details["per_reference"] = [round(fmean(s), 4) for s in streams]
    return segments, details

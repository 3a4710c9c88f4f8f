"""MetricX's settings, input format and model-directory layout, shared by the ``metricx`` and
``metricx_qe`` metrics and the ``metricx_qe`` rerank feature. Nothing here imports torch: a
plugin's module imports this to validate a recipe;
:mod:`mtcore_plugins.common.neural_metrics.metricx_model` (torch, transformers) loads only when a
metric scores.

The input strings are google-research/metricx's (``metricx24/predict.py``, ``_make_input``)::

    if is_qe:
      example["input"] = ("source: " + example["source"] + " candidate: " + example["hypothesis"])
    else:
      example["input"] = ("source: " + example["source"] + " candidate: " + example["hypothesis"]
                          + " reference: " + example["reference"])

and, for MetricX-23 (``metricx23/predict.py``), ``"candidate: " + hypothesis + " reference: " +
reference`` or, QE, ``"candidate: " + hypothesis + " source: " + source``. The released README's
note that a MetricX-24 QE input file carries an empty ``"reference"`` is about the file: with
``--qe`` the code above never reads it, and neither does this module.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from mtcore.api import NOT_IDENTITY, DataError, PluginConfig, PluginError
from mtcore.api.engine import hash_file

REGRESSION_ID = 250089
"""The vocabulary id whose first-step logit is the score (``metricx24/models.py``:
``# 250089 = <extra_id_10>`` / ``predictions = lm_logits[:, 0, 250089]``)."""
MAX_SCORE = 25.0
"""``predictions = torch.clamp(predictions, 0, 25)``: MQM-like error points, lower is better."""
TRAINED_LENGTH = {23: 1024, 24: 1536}
"""The README's ``--max_input_length`` per version: "The models were trained with a maximum input
length of 1536 and 1024 tokens, respectively, so significantly increasing that value may lead
to unpredictable behavior"."""

DESCRIPTION = "mtcore-model.json"
"""Written by ``fetch_model`` (``metric: metricx``): {"id", "revision"}, what signatures name."""
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
"""Weight files in order of preference: safetensors (one file, or shards and their index), then
a pickle read with ``torch.load(weights_only=True)`` only."""
TOKENIZER_DIR = "tokenizer"


class MetricXConfig(PluginConfig):
    model: str = Field(
        ...,
        min_length=1,
        description="the step input connected to a fetched MetricX model (fetch_model with "
        "metric: metricx), or a local directory of one (config.json, model.safetensors)",
    )
    tokenizer: str | None = Field(
        None,
        min_length=1,
        description="a step input or local directory holding mT5's tokenizer (spiece.model, as "
        "google/mt5-xl has it; every mT5 size shares it); default: the model's tokenizer/ "
        "subdirectory, or the model directory itself when it holds spiece.model",
    )
    version: Literal[23, 24] = Field(
        24,
        description="the MetricX generation whose input format the model was trained on: 24 "
        "(hybrid: source, candidate and reference) or 23 (candidate with reference or source)",
    )
    max_input_length: int | None = Field(
        None,
        ge=16,
        le=8192,
        description="tokens kept per input (with the end-of-sequence token the released code "
        "then removes); default: the length the version was trained with, 1536 (24) or 1024 (23)",
    )
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="weights and activations: fp32, or bf16 (how the released predict.py, "
        "torch_dtype='auto', runs the *-bfloat16 checkpoints)",
    )
    batch_size: int = Field(
        8, ge=1, le=1024, description="inputs per forward pass", json_schema_extra=NOT_IDENTITY
    )
    threads: int = Field(
        0,
        ge=0,
        le=256,
        description="torch CPU threads (0: every core)",
        json_schema_extra=NOT_IDENTITY,
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="auto: the GPU when torch sees one, else the CPU",
        json_schema_extra=NOT_IDENTITY,
    )

    @field_validator("model", "tokenizer")
    @classmethod
    def _existing_path(cls, value: str | None) -> str | None:
        if value is not None and looks_like_path(value) and not Path(value).expanduser().is_dir():
            raise ValueError(
                f"{value!r} is not a directory: give a local MetricX directory, or the name of "
                "the step input connected to a fetched one"
            )
        return value

    def input_length(self) -> int:
        return self.max_input_length or TRAINED_LENGTH[self.version]


def looks_like_path(value: str) -> bool:
    """A setting naming a directory rather than a step input: it has a slash or exists."""
    return "/" in value or "\\" in value or Path(value).expanduser().exists()


def resolve(value: str, resources: Mapping[str, Path], what: str) -> Path:
    """The directory ``value`` names: a connected step input first (its artifact directory),
    else a local path; a name that is neither is an error listing the connected inputs."""
    if value in resources:
        return Path(resources[value])
    if looks_like_path(value):
        return Path(value).expanduser()
    have = ", ".join(sorted(resources)) or "none"
    raise PluginError(
        f"{what}: {value!r} is neither a connected step input (connected: {have}) nor a "
        "directory; connect the fetched model under the step's inputs, or give its path"
    )


def format_input(source: str, hypothesis: str, reference: str | None, version: int) -> str:
    """The model's input text, exactly as the released ``predict.py`` builds it; ``reference``
    None is QE."""
    if version == 23:
        if reference is None:
            return "candidate: " + hypothesis + " source: " + source
        return "candidate: " + hypothesis + " reference: " + reference
    if reference is None:
        return "source: " + source + " candidate: " + hypothesis
    return "source: " + source + " candidate: " + hypothesis + " reference: " + reference


def weight_files(model_dir: Path) -> list[Path]:
    """The files holding the weights, in :data:`WEIGHTS`'s preference; a clear error when the
    directory holds none."""
    for name in WEIGHTS:
        path = model_dir / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            index = read_small_json(path)
            weight_map = index.get("weight_map")
            shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
            if not shards or any(not isinstance(s, str) or "/" in s or "\\" in s for s in shards):
                raise DataError(f"{path}: weight_map names no shards, or shards outside the dir")
            return [model_dir / s for s in shards]
        return [path]
    raise PluginError(
        f"{model_dir} holds no MetricX weights ({', '.join(WEIGHTS)}): give the directory "
        "fetch_model (metric: metricx) made, or one with google/metricx-24-*'s files"
    )


def tokenizer_dir(model_dir: Path) -> Path:
    """Where the model's tokenizer is when the ``tokenizer`` setting is not given."""
    sub = model_dir / TOKENIZER_DIR
    if sub.is_dir():
        return sub
    if (model_dir / "spiece.model").is_file() or (model_dir / "tokenizer_config.json").is_file():
        return model_dir
    raise PluginError(
        f"{model_dir} has no tokenizer (no {TOKENIZER_DIR}/ and no spiece.model): set "
        "`tokenizer` to a directory with mT5's spiece.model (google/mt5-xl's)"
    )


def describe(model_dir: Path) -> tuple[str, str]:
    """(id, revision) for a signature: ``mtcore-model.json``'s when the fetch wrote one, else
    the directory's name; a missing revision is the weights' sha256, first 12 digits."""
    model_id, revision = model_dir.resolve().name, None
    described = model_dir / DESCRIPTION
    if described.is_file():
        meta = read_small_json(described)
        if isinstance(meta.get("id"), str) and meta["id"]:
            model_id = meta["id"]
            revision = meta.get("revision") if isinstance(meta.get("revision"), str) else None
    return model_id, revision or weights_digest(model_dir)[:12]


def read_small_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file of a few kilobytes (an index, a description)."""
    try:
        if path.stat().st_size > 16 << 20:
            raise ValueError("over 16 MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: not a JSON object")
    return data


def weights_digest(model_dir: Path) -> str:
    """sha256 of the weights (of each shard's digest, in order, for several files)."""
    digests = [hash_file(path) for path in weight_files(model_dir)]
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()

"""COMET models (unbabel-comet) loaded as data and scored with each distinct input encoded once.

Loading. comet's own ``load_from_checkpoint`` reads ``hparams.yaml`` with yaml's FullLoader and
the checkpoint through Lightning's ``torch.load``: both can be made to run code. Here the
hparams are read with ``yaml.safe_load``; the class is looked up in comet's own table among the
four metric classes mtcore scores with (:data:`CLASSES`); the model is built from the hparams
with the encoder's tokenizer and ``config.json`` from a LOCAL directory (``local_files_only``,
no pretrained weights; comet's encoders name their tokenizer and config classes themselves, so
no code of the directory's runs); and the checkpoint is read with ``torch.load(weights_only=
True)``, which refuses any pickled object but tensors and plain containers. The hparams saved
inside the checkpoint (Lightning's ``hyper_parameters``) override the yaml's, as they do in
comet's loader, which reads the yaml only for ``class_identifier``.

Scoring (the idea of Unbabel/COMET PR #42). A ``regression_metric`` (COMET-22) or
``referenceless_regression_metric`` embeds each segment on its own, so each distinct text is
embedded once, whatever role it plays, and only the small estimator runs per (source,
hypothesis, reference): scoring ten systems, an n-best list or MBR (every candidate against
every other as pseudo-reference) costs one encoder pass per distinct sentence. A
``unified_metric`` (CometKiwi) or ``xcomet_metric`` encodes the hypothesis jointly with the
source (and reference): identical input tuples are scored once. Batches are sorted by token
count, so padding is small and a score does not depend on the batch it falls in.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from mtcore.api import NOT_IDENTITY, PluginConfig, PluginError, content_hash
from mtcore_plugins.common.runtime.isolated import report

if TYPE_CHECKING:
    import torch

PACKAGE = "unbabel-comet"
INSTALL = f"pip install {PACKAGE} --no-deps (its other requirements: requirements/comet.txt)"
CLASSES = {
    "regression_metric": "reference-based COMET (Unbabel/wmt22-comet-da: COMET-22)",
    "referenceless_regression_metric": "COMET-QE (Unbabel/wmt21-comet-qe-da)",
    "unified_metric": "CometKiwi (Unbabel/wmt22-cometkiwi-da)",
    "xcomet_metric": "xCOMET (Unbabel/XCOMET-XL)",
}
LICENCES = {
    "unbabel-comet": "Apache-2.0 (the code)",
    "models": "the model's own, by its card: Unbabel/wmt22-comet-da Apache-2.0; "
    "Unbabel/wmt22-cometkiwi-da, wmt23-cometkiwi-da-xl/xxl and XCOMET-XL/XXL CC BY-NC-SA 4.0 "
    "(no commercial use); check it before use",
}
EMBEDDED = ("regression_metric", "referenceless_regression_metric")
IDENTITY_FILES = ("mtcore-model.json", "artifact.json")
ESTIMATOR_ROWS = 1024  # rows per estimator call: a fixed size, independent of batch_size
CACHED_TEXTS = 100_000  # sentence embeddings kept between calls (400 MB at XLM-R large's 1024)
Triple = tuple[str, str, str | None]
"""(source, hypothesis, reference or None for quality estimation)."""


def comet_installed() -> bool:
    return importlib.util.find_spec("comet") is not None


def names_a_path(value: str) -> bool:
    """Whether a ``model`` setting is a path (it has a ``/`` or exists) rather than the name of
    a step input connected to a fetched model."""
    return "/" in value or Path(value).expanduser().exists()


def checkpoint_file(model: str | Path) -> Path:
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


class CometModelConfig(PluginConfig):
    """Settings shared by the COMET metrics and the CometKiwi rerank feature."""

    model: str = Field(
        ...,
        min_length=1,
        description="the step input connected to a fetched COMET model, or a local model "
        "directory (hparams.yaml + checkpoints/model.ckpt) or its model.ckpt",
    )
    encoder: str | None = Field(
        None,
        min_length=1,
        description="local directory with the encoder's tokenizer and config.json (default: "
        "the model's encoder/ subdirectory, or its hparams' pretrained_model if that is a "
        "local directory)",
    )
    batch_size: int = Field(
        16, ge=1, le=4096, description="segments per encoder batch",
        json_schema_extra=NOT_IDENTITY,
    )  # fmt: skip
    threads: int = Field(
        0, ge=0, le=256, description="torch CPU threads (0: torch's default)",
        json_schema_extra=NOT_IDENTITY,
    )  # fmt: skip
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: the GPU when torch sees one, else the CPU",
        json_schema_extra=NOT_IDENTITY,
    )  # fmt: skip
    precision: Literal["fp32", "fp16", "bf16"] = Field(
        "fp32", description="fp16/bf16 autocast (fp16 on a GPU only); scores move slightly"
    )

    @field_validator("model")
    @classmethod
    def _model_usable(cls, value: str) -> str:
        if names_a_path(value):
            checkpoint_file(value)
            if not comet_installed():
                raise ValueError(f"COMET needs the {PACKAGE} package, not installed: {INSTALL}")
        return value

    @field_validator("encoder")
    @classmethod
    def _encoder_exists(cls, value: str | None) -> str | None:
        if value is not None and not (Path(value).expanduser() / "config.json").is_file():
            raise ValueError(
                f"encoder {value!r} is not a directory with config.json: give the local "
                "directory of the model's encoder (tokenizer files and config.json)"
            )
        return value

    @model_validator(mode="after")
    def _precision_on_device(self) -> CometModelConfig:
        if self.device == "cpu" and self.precision == "fp16":
            raise ValueError("precision fp16 needs a GPU; on the CPU use fp32 or bf16")
        return self


@dataclass
class ModelFiles:
    """Where a COMET model lies, and what names it in a score's signature."""

    directory: Path
    checkpoint: Path
    id: str
    revision: str | None = None

    def pinned_revision(self) -> str:
        """The revision recorded with the model, else the sha256 of model.ckpt (12 digits)."""
        if self.revision is None:
            self.revision = content_hash(self.checkpoint)[:12]
        return self.revision


def model_files(value: str, resources: Mapping[str, Path], who: str) -> ModelFiles:
    """The model ``value`` names: a connected step input (its artifact directory), else a
    path. Its id and revision come from ``mtcore-model.json`` or the artifact's metadata
    (``{"id": ..., "revision": ...}``), a Hugging Face cache path, or the directory's name."""
    if value in resources:
        where = Path(resources[value])
    elif names_a_path(value):
        where = Path(value).expanduser()
    else:
        have = ", ".join(sorted(resources)) or "none"
        raise PluginError(
            f"{who}: model {value!r} is neither an input connected to the step (connected: "
            f"{have}) nor an existing local path"
        )
    try:
        checkpoint = checkpoint_file(where)
    except ValueError as exc:
        raise PluginError(f"{who}: {exc}") from None
    directory = checkpoint.parents[1] if checkpoint.parent.name == "checkpoints" else where
    model_id, revision = _identity(directory, checkpoint)
    return ModelFiles(directory, checkpoint, model_id, revision)


def _identity(directory: Path, checkpoint: Path) -> tuple[str, str | None]:
    for name in IDENTITY_FILES:
        path = directory / name
        meta = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        if isinstance(meta, dict) and meta.get("id"):
            revision = meta.get("revision")
            return str(meta["id"]).removeprefix("hf:"), str(revision) if revision else None
    hub = directory.parent.parent.name  # .../models--Unbabel--wmt22-comet-da/snapshots/<sha>
    if directory.parent.name == "snapshots" and hub.startswith("models--"):
        return hub.removeprefix("models--").replace("--", "/"), directory.name
    return (directory.name if checkpoint.parent.name == "checkpoints" else checkpoint.stem), None


def read_hparams(files: ModelFiles, who: str) -> dict[str, Any]:
    """``hparams.yaml`` as data (``yaml.safe_load``), its ``class_identifier`` checked."""
    import yaml

    path = files.directory / "hparams.yaml"
    if not path.is_file():
        raise PluginError(f"{who}: {path} is missing: a COMET model directory holds hparams.yaml")
    try:
        hparams = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PluginError(f"{who}: {path} is not plain YAML data ({exc})") from None
    if not isinstance(hparams, dict):
        raise PluginError(f"{who}: {path} is not a mapping of hyperparameters")
    kind = hparams.get("class_identifier")
    if kind not in CLASSES:
        raise PluginError(
            f"{who}: {path}: class_identifier {kind!r} is not a COMET metric mtcore scores "
            f"with; valid: {', '.join(CLASSES)}"
        )
    return hparams


def encoder_directory(files: ModelFiles, hparams: Mapping[str, Any], encoder: str | None) -> Path:
    """The local encoder directory: ``encoder``, else ``<model>/encoder``, else the hparams'
    ``pretrained_model`` when it is a local directory."""
    named = hparams.get("pretrained_model")
    candidates = [Path(encoder).expanduser()] if encoder else [files.directory / "encoder"]
    if not encoder and isinstance(named, str) and Path(named).expanduser().is_dir():
        candidates.append(Path(named).expanduser())
    for path in candidates:
        if (path / "config.json").is_file():
            return path
    raise PluginError(
        f"the COMET model {files.directory} needs its encoder ({named!r}) as a local directory "
        f"with its tokenizer and config.json (looked in: {', '.join(map(str, candidates))}); "
        f"fetch the encoder's repository there or set `encoder:` to its directory"
    )


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint as data: ``torch.load(weights_only=True)`` (tensors, numbers, strings
    and containers only; a pickled object that would run code is refused, not run)."""
    import torch

    with open(path, "rb") as handle:
        if handle.read(24).startswith(b"version https://git-lfs"):
            raise PluginError(f"{path} is a Git LFS pointer, not the checkpoint: fetch its data")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc).partition("WeightsUnpickler error:")[2].strip() or str(exc)
        reason = text.splitlines()[0].split(" by default.")[0]  # not torch's allow-list advice
        if "Unsupported global" not in reason:
            raise PluginError(f"{path} is not a readable torch checkpoint ({reason})") from None
        raise PluginError(
            f"{path} was refused: it holds pickled Python objects beyond tensors and plain "
            f"data ({reason}); mtcore reads COMET checkpoints as data only"
        ) from None
    except (RuntimeError, OSError, EOFError) as exc:
        raise PluginError(f"{path} is not a readable torch checkpoint ({exc})") from None
    if isinstance(checkpoint, dict) and "state_dict" not in checkpoint:
        checkpoint = {"state_dict": checkpoint}  # a bare state dict
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint["state_dict"], dict):
        raise PluginError(f"{path} holds no state_dict: not a COMET checkpoint")
    return checkpoint


def load_model(files: ModelFiles, encoder: str | None, classes: Sequence[str], who: str) -> Any:
    """The COMET model of ``files`` in eval mode on the CPU, its class one of ``classes``."""
    if not comet_installed():
        raise PluginError(f"{who} needs the {PACKAGE} package, which is not installed: {INSTALL}")
    hparams = read_hparams(files, who)
    kind = hparams["class_identifier"]
    if kind not in classes:
        raise PluginError(
            f"{who} scores with {' or '.join(CLASSES[c] for c in classes)} models; "
            f"{files.directory} holds a {kind} model ({CLASSES[kind]})"
        )
    local = encoder_directory(files, hparams, encoder)  # before reading gigabytes of weights
    checkpoint = read_checkpoint(files.checkpoint)
    saved = checkpoint.get("hyper_parameters")
    model = _build(kind, {**hparams, **(saved if isinstance(saved, dict) else {})}, local)
    _load_weights(model, checkpoint["state_dict"], files.checkpoint)
    return model.eval().requires_grad_(False)


def _build(kind: str, hparams: dict[str, Any], encoder: Path) -> Any:
    from comet.models import str2model
    from transformers.modeling_utils import no_init_weights

    cls = str2model[kind]
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {key: value for key, value in hparams.items() if key in accepted}
    kwargs.update(pretrained_model=str(encoder), load_pretrained_weights=False)
    kwargs.update(local_files_only=True)
    if kwargs.get("layer_transformation") == "sparsemax_patch":
        kwargs["layer_transformation"] = "softmax"  # as comet >= 2.2.4 loads it (COMET #244)
    # every weight comes from the checkpoint (missing keys are refused): skip random init
    with no_init_weights():
        return cls(**kwargs)


def _load_weights(model: Any, state: dict[str, Any], path: Path) -> None:
    """Loads ``state``; every parameter and buffer must be in it. Older transformers saved the
    position-ids buffer and a pooler that comet's encoders leave out: those are ignored."""

    def ignorable(key: str) -> bool:
        return key.endswith("position_ids") or ".pooler." in key

    result = model.load_state_dict(state, strict=False)
    missing = [key for key in result.missing_keys if not ignorable(key)]
    unexpected = [key for key in result.unexpected_keys if not ignorable(key)]
    if missing or unexpected:
        raise PluginError(
            f"{path} does not match its hparams.yaml: missing {missing[:5]} ({len(missing)}), "
            f"unexpected {unexpected[:5]} ({len(unexpected)})"
        )


@dataclass
class CometRunner:
    """Scores triples with a loaded model: embeddings of distinct texts (regression classes)
    or distinct joint inputs (unified, xcomet), length-sorted batches, no gradients, eval
    mode. ``stats`` counts the inputs scored and the texts or tuples actually encoded."""

    model: Any
    kind: str
    batch_size: int
    device: str
    precision: str
    stats: dict[str, int] = field(default_factory=lambda: {"inputs": 0, "encoded": 0})
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def open(
        cls, files: ModelFiles, config: CometModelConfig, classes: Sequence[str], who: str
    ) -> CometRunner:
        import torch

        device = choose_device(config.device, config.precision, who)
        if config.threads:
            torch.set_num_threads(config.threads)
        model = load_model(files, config.encoder, classes, who).to(device)
        kind = model.hparams.class_identifier
        return cls(model, kind, config.batch_size, device, config.precision)

    @property
    def uses_references(self) -> bool:
        if self.kind == "regression_metric":
            return True
        return self.kind != "referenceless_regression_metric" and "ref" in list(
            self.model.hparams.get("input_segments", ["mt", "src", "ref"])
        )

    def score(self, triples: Sequence[Triple]) -> list[float]:
        """One score per (source, hypothesis, reference) triple, in order; references are all
        None (quality estimation) or all given."""
        import torch

        given = {ref is not None for _, _, ref in triples}
        if len(given) > 1:
            raise PluginError("COMET scores all inputs with references or all without")
        if self.kind == "regression_metric" and False in given:
            raise PluginError("a reference-based COMET model needs a reference for every input")
        self.stats["inputs"] += len(triples)
        if not triples:
            return []
        with torch.inference_mode(), self._autocast():
            if self.kind in EMBEDDED:
                return self._score_embedded(triples)
            return self._score_jointly(triples, with_refs=True in given and self.uses_references)

    def _autocast(self) -> AbstractContextManager[Any]:
        import torch

        if self.precision == "fp32":
            return nullcontext()
        dtype = torch.float16 if self.precision == "fp16" else torch.bfloat16
        return torch.autocast(device_type=self.device, dtype=dtype)

    def _score_embedded(self, triples: Sequence[Triple]) -> list[float]:
        import torch

        index: dict[str, int] = {}
        reference = self.kind == "regression_metric"
        rows = [
            [index.setdefault(text, len(index)) for text in (src, mt, src if ref is None else ref)]
            for src, mt, ref in ((s, m, r if reference else None) for s, m, r in triples)
        ]
        table = self._embed(list(index))
        out: list[float] = []
        for start in range(0, len(rows), ESTIMATOR_ROWS):
            chunk = torch.tensor(rows[start : start + ESTIMATOR_ROWS], device=self.device)
            src, mt, ref = (table[chunk[:, i]] for i in range(3))
            out.extend(self._estimate(src, mt, ref).float().cpu().tolist())
        return out

    def _estimate(self, src: torch.Tensor, mt: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        import torch

        if self.kind == "regression_metric":
            return self.model.estimate(src, mt, ref).score
        features = torch.cat((mt, src, mt * src, torch.abs(mt - src)), dim=1)  # as its forward
        return self.model.estimator(features).view(-1)

    def _embed(self, texts: list[str]) -> torch.Tensor:
        """Sentence embeddings of ``texts`` (float32, one row each). Embeddings are kept across
        calls (up to :data:`CACHED_TEXTS`): the sources and references of one test set are
        embedded once for all the systems, or all the n-best lists, scored after it."""
        import torch

        new = [text for text in dict.fromkeys(texts) if text not in self.cache]
        if len(self.cache) + len(new) > CACHED_TEXTS:
            self.cache.clear()
            new = list(dict.fromkeys(texts))
        tokens = self._tokenize(new)
        for batch in self._batches(len(new), lambda i: len(tokens[i])):
            ids, mask = _pad([tokens[i] for i in batch], self.model.encoder.tokenizer.pad_token_id)
            vectors = self.model.get_sentence_embedding(ids.to(self.device), mask.to(self.device))
            self.cache.update(zip((new[i] for i in batch), vectors.float(), strict=True))
        self.stats["encoded"] += len(new)
        return torch.stack([self.cache[text] for text in texts])

    def _score_jointly(self, triples: Sequence[Triple], with_refs: bool) -> list[float]:
        keys = ("src", "mt", "ref") if with_refs else ("src", "mt")
        keyed = [(src, mt, ref or "") if with_refs else (src, mt) for src, mt, ref in triples]
        unique: dict[tuple[str, ...], int] = {}
        where = [unique.setdefault(key, len(unique)) for key in keyed]
        inputs = list(unique)
        texts = sorted({text for row in inputs for text in row})
        counts = dict(zip(texts, map(len, self._tokenize(texts)), strict=True))
        scores = [0.0] * len(inputs)
        for batch in self._batches(len(inputs), lambda i: sum(counts[t] for t in inputs[i])):
            samples = [dict(zip(keys, inputs[i], strict=True)) for i in batch]
            prepared = self.model.prepare_sample(samples, stage="predict")
            moved = tuple({k: _to(v, self.device) for k, v in part.items()} for part in prepared)
            values = self.model.predict_step(moved)["scores"].float().cpu().tolist()
            for i, value in zip(batch, values, strict=True):
                scores[i] = value
        self.stats["encoded"] += len(inputs)
        return [scores[i] for i in where]

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []  # the tokenizer fails on an empty batch
        encoder = self.model.encoder
        limit = encoder.max_positions - 2  # as comet's Encoder.prepare_sample truncates
        encoded = encoder.tokenizer(texts, truncation=True, max_length=limit)
        return list(encoded["input_ids"])

    def _batches(self, count: int, length: Callable[[int], int]) -> Iterator[list[int]]:
        """Index batches, longest inputs first (a batch too large for memory fails early); in
        a worker, each batch done is reported (``isolated.report``)."""
        order = sorted(range(count), key=lambda i: (-length(i), i))
        for start in range(0, count, self.batch_size):
            yield order[start : start + self.batch_size]
            report(min(start + self.batch_size, count), count)


def choose_device(setting: str, precision: str, who: str) -> str:
    import torch

    cuda = torch.cuda.is_available()
    if setting == "cuda" and not cuda:
        raise PluginError(f"{who}: device cuda, but torch sees no GPU; use device cpu or auto")
    device = "cuda" if cuda and setting != "cpu" else "cpu"
    if device == "cpu" and precision == "fp16":
        raise PluginError(f"{who}: precision fp16 needs a GPU and none is used; use fp32 or bf16")
    return device


def _pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) right-padded as comet's tokenizer call pads them."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def _to(value: Any, device: str) -> Any:
    return value.to(device) if hasattr(value, "to") else value

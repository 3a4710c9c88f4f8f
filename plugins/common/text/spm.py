"""SentencePiece models as the spm step writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtcore.api import DataError


def load_spm(path: Path) -> Any:
    import sentencepiece as spm

    from mtcore.api import Artifact

    artifact = Artifact.open(path)
    if artifact.meta.get("type") != "sentencepiece":
        raise DataError(f"{path} is not a SentencePiece model (artifact type {artifact.type!r})")
    return spm.SentencePieceProcessor(model_file=str(artifact.file("model", "spm.model")))

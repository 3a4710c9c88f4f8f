"""Trained fairseq models inside filters: the check that an input is a train step's model, and
a translator loaded once per worker process through the translate step's
:class:`~mtcore_plugins.common.decoding.translator.Translator` (same checks of the model artifact,
same model plugins, same SentencePiece handling). Force decoding, log P(y|x), goes through the
shared :class:`~mtcore_plugins.common.decoding.force.ForceDecoder`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtcore.api import PluginError, worker_memo


def model_meta(folder: Path, role: str, filter_name: str) -> dict[str, Any]:
    """The ``artifact.json`` of a train step's model, checked to be one."""
    meta_file = folder / "artifact.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    if meta.get("type") != "fairseq-model":
        raise PluginError(
            f"filter {filter_name!r}: input {role!r} ({folder}) is not a train step's model "
            f"(artifact type {meta.get('type')!r}); connect it to a train step"
        )
    return meta


def translator(model: Path, spm: Path, src: str, tgt: str, threads: int, **decoding: Any) -> Any:
    """A :class:`Translator` for one model, loaded once per worker."""
    key = (str(model), str(spm), src, tgt, threads, tuple(sorted(decoding.items())))

    def load() -> Any:
        import torch

        from mtcore.api import Artifact, load_registry
        from mtcore_plugins.common.decoding.translator import DecodeJob, Translator

        torch.set_num_threads(threads)
        registry = load_registry()
        # the translate step's own settings model, through the registry (not its module)
        settings = registry.load("steps", "translate").Config
        config = settings(src=src, tgt=tgt, threads=threads, **decoding)
        job = DecodeJob(
            step_id=f"model {model}",
            inputs={"model": Artifact.open(model), "spm": Artifact.open(spm)},
            registry=registry,
        )
        return Translator(config, job)

    return worker_memo(("filter translator", *key), load)

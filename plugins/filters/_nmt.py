"""Trained fairseq models inside filters: loaded once per worker process through the translate
step's :class:`~mtcore_plugins.common.decoding.Translator` (same checks of the model artifact,
same model plugins, same SentencePiece handling), and force-decoded with fairseq's
``SequenceScorer`` to get log P(y|x)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.errors import PluginError

_TRANSLATORS: dict[tuple[Any, ...], Any] = {}


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
    """A :class:`Translator` for one model, cached per process (a worker loads it once)."""
    key = (str(model), str(spm), src, tgt, threads, tuple(sorted(decoding.items())))
    if key not in _TRANSLATORS:
        import torch

        from mtcore.registry import load_registry
        from mtcore.step import Artifact
        from mtcore_plugins.common.decoding import DecodeJob, Translator

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
        _TRANSLATORS[key] = Translator(config, job)
    return _TRANSLATORS[key]


def encode(translator: Any, texts: Sequence[str], side: str, reverse: bool = False) -> list[Any]:
    """Token ids (EOS last) of ``texts`` in the model's ``src`` or ``tgt`` dictionary;
    ``reverse`` reads the pieces right to left (targets of an R2L model)."""
    dictionary = translator.src_dict if side == "src" else translator.tgt_dict
    out = []
    for pieces in translator.spm.encode(list(texts), out_type=str):
        if reverse:
            pieces = pieces[::-1]
        ids = dictionary.encode_line(" ".join(pieces), add_if_not_exist=False, append_eos=True)
        out.append(ids.long())
    return out


def batches(lengths: Sequence[int], batch_size: int, max_tokens: int) -> Iterator[list[int]]:
    """Indices grouped by length (shortest first) into batches of at most ``batch_size``
    sentences and ``max_tokens`` padded tokens."""
    batch: list[int] = []
    longest = 0
    for index in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        longest = max(longest, lengths[index])
        if batch and (len(batch) >= batch_size or longest * (len(batch) + 1) > max_tokens):
            yield batch
            batch, longest = [], lengths[index]
        batch.append(index)
    if batch:
        yield batch


def log_probs(
    translator: Any, sources: list[Any], targets: list[Any], batch_size: int, max_tokens: int
) -> np.ndarray:
    """log P(y|x) (natural log, EOS included) of each (source ids, target ids) under the
    translator's model, force-decoded in batches; NaN where a side is longer than the model's
    positions (a truncated target would be scored on part of the sentence)."""
    import torch
    from fairseq.data import data_utils
    from fairseq.sequence_scorer import SequenceScorer

    src_dict, tgt_dict = translator.src_dict, translator.tgt_dict
    scorer = SequenceScorer(tgt_dict)
    model = translator.models[0]
    max_source, max_target = model.max_positions()
    out = np.full(len(sources), np.nan)
    fits = [
        i
        for i in range(len(sources))
        if len(sources[i]) <= max_source and len(targets[i]) <= max_target
    ]
    lengths = [len(sources[i]) + len(targets[i]) for i in fits]
    for group in batches(lengths, batch_size, max_tokens):
        rows = [fits[g] for g in group]
        src = [sources[i] for i in rows]
        tgt = [targets[i] for i in rows]
        sample = {
            "net_input": {
                "src_tokens": data_utils.collate_tokens(
                    src, src_dict.pad(), src_dict.eos(), left_pad=True
                ),
                "src_lengths": torch.tensor([len(s) for s in src]),
                "prev_output_tokens": data_utils.collate_tokens(
                    tgt, tgt_dict.pad(), tgt_dict.eos(), left_pad=False, move_eos_to_beginning=True
                ),
            },
            "target": data_utils.collate_tokens(
                tgt, tgt_dict.pad(), tgt_dict.eos(), left_pad=False
            ),
        }
        with torch.inference_mode():
            hypos = scorer.generate([model], sample)
        for row, hypo in zip(rows, hypos, strict=True):
            out[row] = float(hypo[0]["positional_scores"].sum())
    return out

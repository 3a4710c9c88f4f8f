"""Segmentations of the ``binarize`` step beyond SentencePiece's best: a pretrained model's
pieces with tags kept whole, and subword regularization's samples."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from mtcore_plugins.steps._binarize_config import SubwordSampling
from mtcore_plugins.steps._pretrained_init import LanguageTokens


def tagged(processor: LanguageTokens, lines: list[str], tags: frozenset[str]) -> list[list[str]]:
    """The pieces of each line, a leading word in ``tags`` kept whole."""
    if not tags:
        return processor.pieces(lines)
    heads: list[list[str]] = []
    rests: list[str] = []
    for line in lines:
        word, _, rest = line.partition(" ")
        kept = word in tags
        heads.append([word] if kept else [])
        rests.append(rest if kept else line)
    return [head + pieces for head, pieces in zip(heads, processor.pieces(rests), strict=True)]


def sampled(
    processor: Any, texts: list[str], sampling: SubwordSampling, part: tuple[int, int]
) -> list[list[str]]:
    """One sampled segmentation per text. SentencePiece draws from a generator per thread,
    seeded from the global seed when the thread first samples (a later
    ``set_random_generator_seed`` does not reseed it), so each part is sampled on a new
    thread started after setting a seed derived from ``sampling.seed`` and the part's
    (chunk, copy) number: the same samples in any process, whatever ran before."""
    import sentencepiece as spm

    key = hashlib.sha256(f"{sampling.seed}:{part[0]}:{part[1]}".encode()).digest()
    spm.set_random_generator_seed(int.from_bytes(key[:4], "little"))
    result: list[list[list[str]]] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            result.append(
                [
                    processor.encode(
                        text,
                        out_type=str,
                        enable_sampling=True,
                        alpha=sampling.alpha,
                        nbest_size=sampling.nbest_size,
                    )
                    for text in texts
                ]
            )
        except BaseException as exc:  # re-raised on the calling thread
            failed.append(exc)

    thread = threading.Thread(target=work, name="spm-sampling")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return result[0]

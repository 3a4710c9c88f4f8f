"""Segmentations of the ``binarize`` step beyond SentencePiece's best: a pretrained model's
pieces with tags kept whole, and subword regularization's samples."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from mtcore_plugins.steps._binarize_config import SubwordSampling
from mtcore_plugins.steps._pretrained_init import LanguageTokens


def tagged(processor: LanguageTokens, lines: list[str], tags: frozenset[str]) -> list[list[str]]:
    """The pieces of each line, every space-separated word in ``tags`` kept whole (a leading
    ``<BT>``, the noise's ``<blank>`` anywhere); a line without one is pieced as it is."""
    if not tags:
        return processor.pieces(lines)
    runs: list[str] = []  # the text between tag words, pieced in one batch
    layouts: list[list[str | int]] = []  # per line: tag words and indices into runs
    for line in lines:
        words = line.split(" ")
        if not tags.intersection(words):
            layouts.append([len(runs)])
            runs.append(line)
            continue
        layout: list[str | int] = []
        text: list[str] = []
        for word in [*words, ""]:
            if word in tags or (word == "" and text):
                if text:
                    layout.append(len(runs))
                    runs.append(" ".join(text))
                    text = []
                if word:
                    layout.append(word)
            elif word:
                text.append(word)
        layouts.append(layout)
    pieces = processor.pieces(runs)
    return [
        [p for part in layout for p in ([part] if isinstance(part, str) else pieces[part])]
        for layout in layouts
    ]


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

"""Starts a model with a new vocabulary from a pretrained checkpoint (HW-TSC §3.3: continued
training of M2M-100 on Livonian, whose unknown tokens were given "very low-frequent words in the
vocabulary").

The rule, per side (source embeddings follow the source dictionary; target embeddings and the
output projection follow the target dictionary):

- a token of the new dictionary that the pretrained dictionary has (the four specials
  included) gets its pretrained row, unchanged;
- a new token the pretrained dictionary lacks borrows the row of a rare pretrained entry: the
  donors are the pretrained entries the new dictionary does not use, rarest first (by the count
  in the pretrained ``dict.txt``; among equal counts the later entry, as fairseq sorts by
  frequency), handed out in the new dictionary's order (its most frequent new token gets the
  rarest donor). When there are more new tokens than donors the donors are used again from the
  start (counted as ``reused``); when every pretrained entry is shared, the rarest shared entries
  donate;
- fairseq's padding entries (``madeupword0000`` ...) that only the new dictionary has take the
  ``<unk>`` row: they never occur in data and need no donor.

Every other parameter is copied as it is; the architecture must be the pretrained one's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PADDING = re.compile(r"madeupword\d{4}$")


@dataclass(frozen=True)
class VocabularyMap:
    """``rows[i]``: the pretrained row that new token ``i`` starts from."""

    rows: list[int]
    shared: int
    borrowed: int
    reused: int


def map_vocabulary(old: Any, new: Any) -> VocabularyMap:
    """The rows of ``new`` (a fairseq ``Dictionary``) in the embedding matrix of ``old``."""
    new_symbols = set(new.symbols)
    ordinary = [i for i in range(old.nspecial, len(old)) if not PADDING.match(old.symbols[i])]
    donors = [i for i in ordinary if old.symbols[i] not in new_symbols] or ordinary
    if not donors:
        raise ValueError("the pretrained dictionary has no ordinary entries to borrow rows from")
    donors.sort(key=lambda i: (old.count[i], -i))
    rows: list[int] = []
    shared = borrowed = 0
    for symbol in new.symbols:
        if symbol in old.indices:
            rows.append(old.indices[symbol])
            shared += 1
        elif PADDING.match(symbol):
            rows.append(old.unk())
        else:
            rows.append(donors[borrowed % len(donors)])
            borrowed += 1
    return VocabularyMap(rows, shared, borrowed, max(0, borrowed - len(donors)))


def embedding_side(key: str) -> str | None:
    """Which dictionary indexes the rows of parameter ``key``: fairseq names token embeddings
    ``*.embed_tokens.*`` and the decoder's output matrix ``decoder.output_projection.*``."""
    if key.startswith("encoder.") and ".embed_tokens." in key:
        return "source"
    if key.startswith("decoder.") and (".embed_tokens." in key or ".output_projection." in key):
        return "target"
    return None


def remap_checkpoint(
    checkpoint: Path, old_dicts: tuple[Path, Path], new_dicts: tuple[Path, Path], output: Path
) -> dict[str, VocabularyMap]:
    """Writes ``output``: ``checkpoint`` with its embedding rows rearranged from the
    (source, target) ``old_dicts`` to ``new_dicts``; returns the map of each side."""
    import torch

    from mtcore_plugins.common.fairseq.setup import add_safe_globals, importing_fairseq

    with importing_fairseq():
        from fairseq.data import Dictionary

    add_safe_globals()
    maps = {
        side: map_vocabulary(Dictionary.load(str(old)), Dictionary.load(str(new)))
        for side, old, new in zip(("source", "target"), old_dicts, new_dicts, strict=True)
    }
    old_sizes = {
        side: len(Dictionary.load(str(p))) for side, p in zip(maps, old_dicts, strict=True)
    }
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    mapped = []
    for key, tensor in state["model"].items():
        side = embedding_side(key)
        if side is None:
            continue
        if tensor.shape[0] != old_sizes[side]:
            raise ValueError(
                f"{checkpoint}: {key} has {tensor.shape[0]} rows, the pretrained {side} "
                f"dictionary {old_dicts[side == 'target']} has {old_sizes[side]} entries"
            )
        state["model"][key] = tensor[torch.tensor(maps[side].rows)].clone()
        mapped.append(key)
    if not mapped:
        raise ValueError(
            f"{checkpoint}: no token embedding (encoder/decoder .embed_tokens., "
            "decoder.output_projection.) to map"
        )
    state.pop("last_optimizer_state", None)
    partial = output.with_name(output.name + ".partial")
    torch.save(state, partial)
    os.replace(partial, output)
    return maps

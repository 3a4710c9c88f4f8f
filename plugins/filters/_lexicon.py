"""IBM-1 lexical tables learnt from word links, and the alignment scores they give.

The ``alignment`` filter aligns a sample of the corpus once with eflomal and keeps, per
direction, how often each source word was linked to each target word. A pair is then scored
from these fixed counts alone, the way eflomal's model-1 scorer reads its own counts:

    p(f | e) = (n(e, f) + a) / (n(e) + a * V),      a = 0.001 (eflomal's LEX_ALPHA),

with ``V`` the target vocabulary size plus one (eflomal's NULL slot), and a sentence's score
in one direction is ``-(1/|t|) * sum_j log max_i p(t_j | s_i)``. Like eflomal's scorer, which
takes the current link out of the counts before reading them, a pair that was in the sample
has its own links left out (matched by its tokens, so a copy of it elsewhere in the corpus
scores the same): a pair's words do not vouch for themselves, whether it was sampled or not.
Scoring reads no other pair, so a pair's score is a function of the pair and the table only.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

LEX_ALPHA = 0.001  # eflomal's Dirichlet prior on lexical translation counts
TABLE_FILE = "lexicon.npz"
VOCAB_FILE = "vocab.json"
Links = tuple[int, ...]  # per token of the choosing side: the linked position, -1 for NULL


def pair_key(source: Sequence[str], target: Sequence[str]) -> int:
    """A 63-bit key of a tokenized pair (unambiguous for any tokens)."""
    digest = hashlib.blake2b(json.dumps([source, target]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def parse_links(line: str, length: int, forward: bool) -> Links:
    """eflomal's Moses-format ``i-j`` links of one pair as, per token of the choosing side (the
    target forward, the source in reverse), the position it links to."""
    links = [-1] * length
    for item in line.split():
        i, j = (int(x) for x in item.split("-"))
        if forward:
            links[j] = i
        else:
            links[i] = j
    return tuple(links)


class Direction:
    """Counts of one direction: ``n(e, f)`` for choosing word ``f`` linked to word ``e``."""

    def __init__(self, counts: dict[int, dict[int, int]], vocabulary: int) -> None:
        self.counts = counts
        self.totals = {e: sum(row.values()) for e, row in counts.items()}
        self.denominator = LEX_ALPHA * (vocabulary + 1)

    def score(self, given: Sequence[int], chosen: Sequence[int], loo: Links | None) -> float:
        """``-(1/|chosen|) * sum_j log max_i p(chosen_j | given_i)``; ``loo`` takes the pair's
        own links out of the counts. Unknown words have id -1 (no counts)."""
        empty: dict[int, int] = {}
        rows = [(e, self.counts.get(e, empty), self.totals.get(e, 0)) for e in set(given)]
        total = 0.0
        for j, f in enumerate(chosen):
            own = given[loo[j]] if loo is not None and loo[j] >= 0 else None
            best = 0.0
            for e, row, n_e in rows:
                n = row.get(f, 0)
                if e == own:
                    n, n_e = n - 1, n_e - 1
                p = (n + LEX_ALPHA) / (n_e + self.denominator)
                if p > best:
                    best = p
            total += math.log(best)
        return -total / len(chosen)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        items = [
            (e, f, n) for e, row in sorted(self.counts.items()) for f, n in sorted(row.items())
        ]
        table = np.array(items, dtype=np.int64).reshape(-1, 3)
        return table[:, 0], table[:, 1], table[:, 2]

    @classmethod
    def from_arrays(cls, e: np.ndarray, f: np.ndarray, n: np.ndarray, vocabulary: int) -> Direction:
        counts: dict[int, dict[int, int]] = {}
        for a, b, c in zip(e.tolist(), f.tolist(), n.tolist(), strict=True):
            counts.setdefault(a, {})[b] = c
        return cls(counts, vocabulary)


class Lexicon:
    """Both directions' tables over one vocabulary per side, and the sampled pairs' links."""

    def __init__(
        self,
        vocab: tuple[list[str], list[str]],
        forward: Direction,
        reverse: Direction,
        own: dict[int, tuple[Links, Links]],
    ) -> None:
        self.vocab = vocab
        self.index = tuple({w: i for i, w in enumerate(words)} for words in vocab)
        self.forward, self.reverse, self.own = forward, reverse, own

    @classmethod
    def learn(
        cls,
        source: Sequence[Sequence[str]],
        target: Sequence[Sequence[str]],
        forward_links: Sequence[str],
        reverse_links: Sequence[str],
    ) -> Lexicon:
        """The tables of aligned pairs (eflomal's forward and reverse link lines)."""
        vocab: tuple[dict[str, int], dict[str, int]] = ({}, {})
        fwd: dict[int, dict[int, int]] = {}
        rev: dict[int, dict[int, int]] = {}
        own: dict[int, tuple[Links, Links]] = {}
        for s, t, line_f, line_r in zip(source, target, forward_links, reverse_links, strict=True):
            ids_s = [vocab[0].setdefault(w, len(vocab[0])) for w in s]
            ids_t = [vocab[1].setdefault(w, len(vocab[1])) for w in t]
            links_f, links_r = parse_links(line_f, len(t), True), parse_links(line_r, len(s), False)
            for j, i in enumerate(links_f):
                if i >= 0:
                    row = fwd.setdefault(ids_s[i], {})
                    row[ids_t[j]] = row.get(ids_t[j], 0) + 1
            for i, j in enumerate(links_r):
                if j >= 0:
                    row = rev.setdefault(ids_t[j], {})
                    row[ids_s[i]] = row.get(ids_s[i], 0) + 1
            own.setdefault(pair_key(s, t), (links_f, links_r))  # a repeated pair: its first
        words = (list(vocab[0]), list(vocab[1]))
        return cls(words, Direction(fwd, len(words[1])), Direction(rev, len(words[0])), own)

    def probability(self, source: Sequence[str], target: Sequence[str]) -> float:
        """``exp(-(s_forward + s_reverse) / 2)`` of a tokenized pair with both sides non-empty."""
        ids_s = [self.index[0].get(w, -1) for w in source]
        ids_t = [self.index[1].get(w, -1) for w in target]
        links = self.own.get(pair_key(source, target))
        forward = self.forward.score(ids_s, ids_t, links[0] if links else None)
        reverse = self.reverse.score(ids_t, ids_s, links[1] if links else None)
        return math.exp(-(forward + reverse) / 2)

    def save(self, folder: Path) -> None:
        (folder / VOCAB_FILE).write_text(
            json.dumps({"source": self.vocab[0], "target": self.vocab[1]}, ensure_ascii=False),
            encoding="utf-8",
        )
        keys = sorted(self.own)
        arrays: dict[str, np.ndarray] = {"keys": np.array(keys, dtype=np.int64)}
        for name, direction in (("forward", self.forward), ("reverse", self.reverse)):
            e, f, n = direction.arrays()
            arrays |= {f"{name}_e": e, f"{name}_f": f, f"{name}_n": n}
        for side, name in enumerate(("forward", "reverse")):
            chunks = [self.own[k][side] for k in keys]
            arrays[f"{name}_links"] = np.array([x for c in chunks for x in c], dtype=np.int16)
            arrays[f"{name}_ends"] = np.cumsum([len(c) for c in chunks], dtype=np.int64)
        np.savez_compressed(folder / TABLE_FILE, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, folder: Path) -> Lexicon:
        words = json.loads((folder / VOCAB_FILE).read_text(encoding="utf-8"))
        vocab = (list(words["source"]), list(words["target"]))
        with np.load(folder / TABLE_FILE) as data:
            arrays = {name: data[name] for name in data.files}
        directions = [
            Direction.from_arrays(
                arrays[f"{name}_e"], arrays[f"{name}_f"], arrays[f"{name}_n"], len(vocab[1 - s])
            )
            for s, name in enumerate(("forward", "reverse"))
        ]
        split = [
            np.split(arrays[f"{name}_links"], arrays[f"{name}_ends"][:-1])
            if len(arrays["keys"])
            else []
            for name in ("forward", "reverse")
        ]
        own = {
            int(k): (tuple(f.tolist()), tuple(r.tolist()))
            for k, f, r in zip(arrays["keys"].tolist(), split[0], split[1], strict=True)
        }
        return cls(vocab, directions[0], directions[1], own)

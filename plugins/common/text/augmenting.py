"""Abilities an augmenter may opt into, read by the ``augment`` step: the tokens it writes into
text (tags, the blank token), which a SentencePiece model must keep whole, and counts of what
it did to the lines."""

from __future__ import annotations

from collections import Counter


class EmitsTokens:
    """An augmenter that writes tokens of its own into the text."""

    def emitted(self) -> frozenset[str]:
        """The tokens this configured augmenter may write (``<BT>``, ``<blank>``)."""
        raise NotImplementedError


class CountsLines:
    """An augmenter that counts what it did to the lines of its ``augment`` calls in
    ``counts``; the ``augment`` step takes them after each call (:meth:`take_counts`)."""

    counts: Counter[str]

    def counter(self) -> Counter[str]:
        """``counts``, made on first use."""
        if not hasattr(self, "counts"):
            self.counts = Counter()
        return self.counts

    def take_counts(self) -> Counter[str]:
        """The counts since the last call, and a fresh counter for the next."""
        taken = self.counter()
        self.counts = Counter()
        return taken

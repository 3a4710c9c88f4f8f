"""Tag and placeholder tokens, shared by the tag augmenters and the synthetic step."""

from __future__ import annotations

from collections.abc import Sequence

TOKEN_PATTERN = r"^\S{1,64}$"
"""A tag or placeholder token: one whitespace-free word (it must stay one word for the
tokenizer; see docs/augmentation.md on SentencePiece's ``user_defined_symbols``)."""


def prepend(token: str, lines: Sequence[str]) -> list[str]:
    """``token`` and a space before every line that has text; an empty or blank line stays as
    it is (a pair made only of a tag would teach nothing but the tag)."""
    return [f"{token} {line}" if line.strip() else line for line in lines]

"""Moses-style word scan shared by the truecase steps and the postprocessors."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

import regex

# train-truecaser.perl / truecase.perl / detruecase.perl: %SENTENCE_END = (".",":","?","!").
SENTENCE_END = frozenset(".:?!")


# Languages whose script has no case: no model by default, passed through unchanged.
CASELESS = frozenset(
    """ja zh zho cmn yue wuu lzh ko kor th tha lo km my ka hy ar fa ur ps he yi hi mr ne bn pa gu
    ta te kn ml si am bo dz""".split()  # noqa: SIM905 (a word list reads better as text)
)


_TOKEN = re.compile(r"\S+")


# regex, not re: its \w includes combining marks, so a decomposed "café" stays one word.
_EDGES = regex.compile(r"(\W*)(.*?)(\W*)", regex.DOTALL)


@functools.cache
def nonbreaking_prefixes(lang: str) -> frozenset[str]:
    """Moses' nonbreaking prefixes of ``lang`` (``Mr``, ``Dr``, ``Mt``; English for a language
    without a list): a word ending in one of these and a period does not end the sentence."""
    from sacremoses.corpus import NonbreakingPrefixes

    prefixes = NonbreakingPrefixes().words(lang.replace("_", "-").split("-")[0])
    # lower-cased, to find "mr." in lower-cased text too; #NUMERIC_ONLY# ones precede numbers
    return frozenset(p.lower() for p in prefixes if "#" not in p)


def _abbreviation(core: str, prefixes: frozenset[str]) -> bool:
    """``Mr``, ``mr``, ``U.S``, ``e.g`` or a capital initial (``J``), but no lower-case single
    letter: ``a.`` ends a sentence."""
    if "." in core and any(c.isalpha() for c in core):
        return True
    return core.lower() in prefixes and (len(core) > 1 or core.isupper())


def _ends_sentence(core: str, trail: str, prefixes: frozenset[str]) -> bool:
    if trail == "." and _abbreviation(core, prefixes):
        return False  # as Moses' tokenizer keeps the period on an abbreviation
    return any(char in SENTENCE_END for char in trail)


def words(line: str, lang: str) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, sentence_initial)`` of every word of ``line`` that has cased letters.
    A sentence starts at the line start and after a token ending in . : ? or ! that is not an
    abbreviation; tokens of punctuation only (an opening quote or bracket) keep the sentence
    start pending, as Moses' delayed sentence start; any other word ends it."""
    prefixes = nonbreaking_prefixes(lang)
    initial = True
    for match in _TOKEN.finditer(line):
        token = match.group()
        edges = _EDGES.fullmatch(token)
        assert edges is not None  # the pattern matches every string
        lead, core, trail = edges.groups()
        if not core:
            initial = initial or _ends_sentence("", token, prefixes)
            continue
        if core.lower() != core.upper():
            start = match.start() + len(lead)
            yield start, start + len(core), initial
        initial = _ends_sentence(core, trail, prefixes)

"""Moses punctuation normalization (``normalize-punctuation.perl`` through sacremoses).

Yishu §2.1.1: "We employed Moses (Koehn et al., 2007) for normalizing spacing and punctuation."
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import regex
from pydantic import Field

from mtcore.api import PluginConfig, Processor
from mtcore_plugins.processors.text import without_breaks

_CONTROL = regex.compile(r"\p{C}")  # sacremoses' remove_control_chars


class MosesPunctConfig(PluginConfig):
    pre_replace_unicode_punct: bool = Field(
        False,
        description="first map CJK/full-width punctuation to ASCII (replace-unicode-punctuation"
        ".perl: U+FF0C to ',', U+3002 to '. ', U+300C to '\"'); changes the look of "
        "Chinese and Japanese text",
    )
    post_remove_control_chars: bool = Field(
        False, description="remove Unicode control characters (category C*) afterwards"
    )
    norm_numbers: bool = Field(
        True, description="a no-break space between digits becomes ',' (de/es/cs/fr) or '.'"
    )
    norm_quote_commas: bool = Field(
        True, description='move a comma or period after a closing quote before it (en: ",→,")'
    )
    penn: bool = Field(True, description="also normalize Penn Treebank quotes (`` and '')")
    perl_parity: bool = Field(False, description="reproduce the Perl script's quirks exactly")


class MosesPunctProcessor(Processor[MosesPunctConfig]):
    """``sacremoses.MosesPunctNormalizer``, its substitutions compiled once per language (the
    library looks each pattern up in ``re``'s cache on every line: twice as slow)."""

    name = "moses_punct"

    def __init__(self, config: MosesPunctConfig | None = None) -> None:
        super().__init__(config)
        self._rules: dict[str, list[tuple[re.Pattern[str], str]]] = {}

    def _compiled(self, lang: str) -> list[tuple[re.Pattern[str], str]]:
        rules = self._rules.get(lang)
        if rules is None:
            from sacremoses import MosesPunctNormalizer

            normalizer = MosesPunctNormalizer(lang=lang, **self.config.model_dump())
            pairs = list(normalizer.substitutions)
            if self.config.pre_replace_unicode_punct:
                pairs = list(normalizer.REPLACE_UNICODE_PUNCTUATION) + pairs
            rules = self._rules[lang] = [(re.compile(p), sub) for p, sub in pairs]
        return rules

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        rules = self._compiled(lang)
        control = self.config.post_remove_control_chars
        out = []
        for line in batch:
            for pattern, sub in rules:
                line = pattern.sub(sub, line)
            if control:
                line = _CONTROL.sub("", line)
            out.append(without_breaks(line.strip()))
        return out

"""Tag tokens prepended to a side of a corpus: a ``<BT>`` marker on synthetic sources (tagged
back-translation, Caswell et al. 2019; NT5 §4.2, Xiaomi §3.2, HW-TSC §5.3) or a target-language
token such as ``<2uk>`` for multilingual training (Johnson et al. 2017; HW-TSC §5.5 adds En→Uk
data to Cs→Uk training)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, field_validator

from mtcore.api import Augmenter, PluginConfig
from mtcore_plugins.common.text.augmenting import EmitsTokens
from mtcore_plugins.common.text.tags import TOKEN_PATTERN, prepend


class TagConfig(PluginConfig):
    token: str = Field(
        "<BT>",
        pattern=TOKEN_PATTERN,
        description="the tag (Caswell et al. 2019: <BT>); make it one SentencePiece piece with "
        "user_defined_symbols",
    )


class TagAugmenter(EmitsTokens, Augmenter[TagConfig]):
    """Prepends ``token`` to every non-empty line."""

    name = "tag"

    def emitted(self) -> frozenset[str]:
        return frozenset({self.config.token})

    def augment(self, lines: Sequence[str], lang: str, first_line: int) -> list[str]:
        return prepend(self.config.token, lines)


class LangTagConfig(PluginConfig):
    lang: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$",
        description="the language the tag names: the target language (Johnson et al. 2017)",
    )
    template: str = Field(
        "<2{lang}>",
        max_length=64,
        description="the token, with {lang} standing for lang (Johnson et al.: <2es>)",
    )

    @field_validator("template")
    @classmethod
    def _one_placeholder(cls, value: str) -> str:
        if "{lang}" not in value or any(ch.isspace() for ch in value):
            raise ValueError(f"template {value!r} must contain {{lang}} and no whitespace")
        if value.replace("{lang}", "").count("{") or value.replace("{lang}", "").count("}"):
            raise ValueError(f"template {value!r}: only {{lang}} may stand in braces")
        return value


class LangTagAugmenter(EmitsTokens, Augmenter[LangTagConfig]):
    """Prepends the language token (``<2uk>``) to every non-empty line."""

    name = "lang_tag"

    def emitted(self) -> frozenset[str]:
        return frozenset({self.token})

    @property
    def token(self) -> str:
        return self.config.template.replace("{lang}", self.config.lang)

    def augment(self, lines: Sequence[str], lang: str, first_line: int) -> list[str]:
        return prepend(self.token, lines)

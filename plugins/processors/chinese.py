"""Traditional → Simplified Chinese (and the other OpenCC conversions).

Xiaomi §2.1: "All the traditional characters of Chinese data are converted to simplified
characters using OpenCC"; Yishu §2.1.1: "Convert traditional Chinese characters to simplified
Chinese characters."
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator

from mtcore.api import PluginConfig, Processor
from mtcore.api.engine import suggest


def opencc_configs() -> list[str]:
    """Names of the conversions the installed OpenCC ships (``t2s``, ``s2twp``, ...)."""
    import opencc

    return sorted(name.removesuffix(".json") for name in opencc.CONFIGS)


def base_lang(lang: str) -> str:
    """``zh`` for ``zh``, ``zh-Hant``, ``zh_TW``."""
    return lang.replace("_", "-").split("-", 1)[0].lower()


class OpenCCConfig(PluginConfig):
    config: str = Field(
        "t2s",
        description="OpenCC conversion: t2s (traditional to simplified), s2t, tw2s, hk2s, s2twp, "
        "t2jp, ...",
    )
    chinese: list[str] = Field(
        default_factory=lambda: ["zh", "zho", "cmn", "yue", "lzh", "wuu"],
        min_length=1,
        description="language codes (before any -script or _region part) converted; sides in "
        "other languages pass through unchanged",
    )

    @field_validator("config")
    @classmethod
    def _known(cls, value: str) -> str:
        value = value.removesuffix(".json")
        known = opencc_configs()
        if value not in known:
            raise ValueError(
                f"unknown OpenCC config {value!r}. {suggest(value, known, 'Installed configs')}"
            )
        return value


class OpenCCProcessor(Processor[OpenCCConfig]):
    """OpenCC conversion of the Chinese sides; one converter per process, built on first use."""

    name = "opencc"

    def __init__(self, config: OpenCCConfig | None = None) -> None:
        super().__init__(config)
        self._converter: Any = None
        self._chinese = {base_lang(code) for code in self.config.chinese}

    def applies_to(self, lang: str) -> bool:
        return base_lang(lang) in self._chinese

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        if not self.applies_to(lang):
            return list(batch)
        if self._converter is None:
            import opencc

            self._converter = opencc.OpenCC(self.config.config)
        convert = self._converter.convert
        return [convert(line) for line in batch]

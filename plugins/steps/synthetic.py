"""Pairs a translate step's output with the text it translated: synthetic parallel data.

- ``mode: back`` (back-translation, Sennrich et al. 2016; NT5 §4.2, Xiaomi §3.2, HW-TSC §5):
  target-side monolingual text was translated into the source language; the translation is the
  (synthetic) source, the monolingual text the (authentic) target.
- ``mode: forward`` (forward translation / self-training, HW-TSC §3.4; ensemble knowledge
  distillation, Xiaomi §3.2 D3): source text was translated into the target language; the
  source is authentic, the translation the synthetic target.

The output has the columns ``(source, target)`` and exactly one pair per input line, in order;
line counts that differ are an error naming the first line without a partner. ``tag``
prepends a token to the source side (tagged back-translation, Caswell et al. 2019). Empty
translations stay (one pair per line) and are counted as ``synthetic.empty``; a downstream
clean step can drop them.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from mtcore.api import (
    BlockReader,
    Corpus,
    CorpusWriter,
    DataError,
    PluginConfig,
    RawBlock,
    Registry,
    Step,
    StepContext,
)
from mtcore.api.engine import encode_lines
from mtcore_plugins.common.text.tags import TOKEN_PATTERN, prepend

LANG = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
SHARD = 20_000


class SyntheticConfig(PluginConfig):
    mode: Literal["back", "forward"] = Field(
        description="back: the translation is the source side (back-translation); forward: "
        "the translation is the target side (forward translation, self-training, distillation)"
    )
    lang: str | None = Field(
        None,
        pattern=LANG,
        description="language of the translated text in the corpus input; default: its only "
        "language, or its only language other than the translation's",
    )
    tag: str | None = Field(
        None,
        pattern=TOKEN_PATTERN,
        description="token prepended to every non-empty source line, e.g. <BT> (Caswell et "
        "al. 2019); make it one SentencePiece piece with user_defined_symbols",
    )


class SyntheticStep(Step[SyntheticConfig]):
    """Inputs: ``corpus``, what the translate step read, and ``hyp``, its output. Output
    ``corpus``: the synthetic parallel corpus, source language first."""

    name = "synthetic"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "hyp": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)

    def emitted_tokens(self, registry: Registry) -> frozenset[str]:
        return frozenset({self.config.tag}) if self.config.tag is not None else frozenset()

    def run(self, ctx: StepContext) -> None:
        text = Corpus.open(ctx.inputs["corpus"].path)
        hyp = Corpus.open(ctx.inputs["hyp"].path)
        if len(hyp.langs) != 1:
            raise DataError(
                f"{ctx.step_id}: hyp {hyp.path} has languages {list(hyp.langs)}; connect a "
                "translate step's output (one language)"
            )
        synthetic = hyp.langs[0]
        authentic = self._authentic(ctx.step_id, text, synthetic)
        files = (text.file(authentic), hyp.file(synthetic))
        check_counts(ctx.step_id, files, (text.count(), hyp.count()))
        back = self.config.mode == "back"
        langs = (synthetic, authentic) if back else (authentic, synthetic)
        with CorpusWriter(ctx.output("corpus"), langs) as writer:
            for raw in BlockReader(files, SHARD):
                sides = self._pair(raw, (authentic, synthetic), ctx)
                writer.write_raw(sides[::-1] if back else sides, raw.count)
        ctx.stats.add("pairs_out", writer.lines)
        ctx.metrics["source"], ctx.metrics["target"] = langs

    def _authentic(self, step_id: str, text: Corpus, synthetic: str) -> str:
        if self.config.lang is not None:
            if self.config.lang not in text.langs:
                raise DataError(
                    f"{step_id}: lang {self.config.lang!r} is not a language of {text.path} "
                    f"(it has {', '.join(text.langs)})"
                )
            chosen = self.config.lang
        else:
            others = [lang for lang in text.langs if lang != synthetic]
            if len(text.langs) > 1 and len(others) != 1:
                raise DataError(
                    f"{step_id}: cannot tell which language of {text.path} "
                    f"({', '.join(text.langs)}) was translated; set lang"
                )
            chosen = text.langs[0] if len(text.langs) == 1 else others[0]
        if chosen == synthetic:
            raise DataError(
                f"{step_id}: the translation and the translated text are both {synthetic!r}; "
                "connect the translate step's corpus input and its output"
            )
        return chosen

    def _pair(self, raw: RawBlock, langs: tuple[str, str], ctx: StepContext) -> tuple[bytes, bytes]:
        """(authentic, synthetic) bytes of one block, checked, the source side tagged."""
        block = raw.decode(langs)
        authentic, synthetic = block.columns
        ctx.stats.add("synthetic.empty", sum(1 for line in synthetic.lines if not line.strip()))
        sides = [authentic.raw, synthetic.raw]
        if self.config.tag is not None:
            source = 1 if self.config.mode == "back" else 0
            lines = block.columns[source].lines
            tagged = prepend(self.config.tag, lines)
            ctx.stats.add(
                "synthetic.tagged", sum(1 for a, b in zip(lines, tagged, strict=True) if a != b)
            )
            sides[source] = encode_lines(tagged)
        return sides[0], sides[1]


def check_counts(step_id: str, files: tuple[Path, Path], counts: tuple[int, int]) -> None:
    """The translated text and its translation must have one line each per segment."""
    if counts[0] != counts[1]:
        short = min(counts)
        raise DataError(
            f"{step_id}: {files[0]} has {counts[0]} lines but {files[1]} has {counts[1]}: line "
            f"{short + 1} has no partner. A translate step writes one line per input line: "
            "connect the corpus it translated as input corpus"
        )

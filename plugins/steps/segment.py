"""Splits the lines of a monolingual corpus into sentences, one a line, in order: Xiaomi §4.1
segments its Common Crawl text into sentences before keeping those of 5 to 100 tokens and
drawing 160M of them. The rules (:mod:`~mtcore_plugins.steps._sentences`): after 。！？ and their
kin for Chinese and Japanese, after . ! ? before a capital for space-delimited languages, with
abbreviations and initials kept whole.

A parallel corpus is refused: splitting its sides apart would misalign them. Streaming, one
block of lines in memory.
"""

# ruff: noqa: RUF002 (the full-width stops of the rules)

from __future__ import annotations

from typing import ClassVar

from mtcore.api import BlockReader, Corpus, CorpusWriter, PluginConfig, Step, StepContext, StepError
from mtcore_plugins.steps._sentences import split_sentences

BLOCK_LINES = 100_000


class SegmentConfig(PluginConfig):
    pass


class SegmentStep(Step[SegmentConfig]):
    """One monolingual corpus in, its sentences out. Stats: ``lines_in``, ``lines_split`` (the
    lines that held more than one sentence), ``empty_dropped`` (lines of whitespace only, which
    hold no sentence) and ``sentences``."""

    name = "segment"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        if len(corpus.langs) != 1:
            raise StepError(
                f"{ctx.step_id}: segments monolingual text; {corpus.path} holds "
                f"{', '.join(corpus.langs)} (splitting the sides apart would misalign them)"
            )
        lang = corpus.langs[0]
        lines_in = split = empty = 0
        with CorpusWriter(ctx.output("corpus"), corpus.langs) as writer:
            for raw in BlockReader(corpus.files(), BLOCK_LINES):
                out: list[str] = []
                for line in raw.raws[0].decode("utf-8").split("\n")[: raw.count]:
                    sentences = split_sentences(line, lang)
                    split += len(sentences) > 1
                    empty += not sentences
                    out.extend(sentences)
                lines_in += raw.count
                if out:
                    data = ("\n".join(out) + "\n").encode("utf-8")
                    writer.write_raw([data], len(out))
        ctx.stats.add("lines_in", lines_in)
        ctx.stats.add("lines_split", split)
        ctx.stats.add("empty_dropped", empty)
        ctx.stats.add("sentences", writer.lines)

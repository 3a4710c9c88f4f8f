"""The step every ``data`` entry becomes: runs a source plugin and writes its corpus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import (
    HASHED_WHEN_SET,
    Corpus,
    CorpusWriter,
    DataError,
    Pair,
    PluginConfig,
    Registry,
    Source,
    Step,
    StepContext,
)
from mtcore.api.engine import INNER_BREAKS, InputPolicy, identity_dict, ingest, write_corpus_meta


class FetchConfig(PluginConfig):
    source: str = Field(description="source plugin name")
    config: dict[str, Any] = Field(default_factory=dict, description="the source plugin's settings")
    input: InputPolicy = Field(default_factory=InputPolicy, description="handling of bad input")
    max_pairs: int | None = Field(
        None,
        ge=1,
        description="keep the first N pairs that pass the input policy and stop reading (as "
        "`head -n`; profiles that shrink a recipe use it); the cut is counted in the stats",
        json_schema_extra=HASHED_WHEN_SET,
    )


class FetchStep(Step[FetchConfig]):
    """Reads a corpus from a source plugin into the workdir, applying the input policy."""

    parallel = True  # its shards go through ctx.executor

    name = "fetch"
    fetches = True
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)

    def _source(self, registry: Registry) -> Source:
        cls = registry.load("sources", self.config.source)
        source = cls.from_dict(self.config.config)
        assert isinstance(source, Source)
        return source

    def plugins_used(self) -> list[tuple[str, str]]:
        return [("sources", self.config.source)]

    def volume(self, lines_in: Mapping[str, float | None]) -> dict[str, float]:
        """With ``max_pairs``, at most that many (the source's size is not known before)."""
        return {} if self.config.max_pairs is None else {"lines": float(self.config.max_pairs)}

    def identity(self, registry: Registry) -> dict[str, Any]:
        """The step's settings with its source's, as the source's ``Config`` hashes them
        (settings added later, such as archive members, formats and ``input.field_count``, are
        ``HASHED_WHEN_SET``: recipes that do not use them keep their cached outputs)."""
        own = super().identity(registry)
        own["config"] = identity_dict(self._source(registry).config)
        return own

    def fingerprint(self, registry: Registry) -> str:
        return self._source(registry).fingerprint()

    def run(self, ctx: StepContext) -> None:
        """Every error names the data entry (the step's id) it comes from: a 404 or a bad line
        of one of a paper profile's thirty corpora says which."""
        try:
            self._fetch(ctx)
        except DataError as exc:
            if str(exc).startswith(f"{ctx.step_id}: "):
                raise
            where = f"data entry {ctx.step_id!r} (source {self.config.source})"
            raise DataError(f"{where}: {exc}") from exc

    def _fetch(self, ctx: StepContext) -> None:
        source = self._source(ctx.registry)
        policy = self.config.input
        langs = source.langs()
        dataset = source.dataset()
        named = {"dataset": dataset} if dataset else {}  # the test set an evaluation names
        # Line-aligned files: read in blocks over the executor, the same pairs and counts as
        # below (with max_pairs, the serial reader stops at the cut without reading on).
        files = source.line_files(ctx.stats) if self.config.max_pairs is None else None
        if files is not None:
            corpus = Corpus(ctx.output("corpus"), langs)
            out = corpus.files()
            with ctx.progress(None, "fetch") as bar:
                try:
                    lines = ingest(files, out, policy, ctx.stats, ctx.executor, bar)
                except DataError as exc:
                    raise source.explain(exc) from exc
            write_corpus_meta(corpus, lines, **named)
            ctx.stats.add("pairs_out", lines)
            return
        with (
            CorpusWriter(ctx.output("corpus"), langs) as writer,
            ctx.progress(None, "fetch") as bar,
        ):
            for number, pair in enumerate(source.read(policy, ctx.stats), start=1):
                if writer.lines == self.config.max_pairs:
                    ctx.stats.add("max_pairs_reached")
                    break
                checked = check_segment(pair, policy, ctx, number)
                if checked is None:
                    continue
                writer.write(checked)
                bar.update(1)
        if named:
            write_corpus_meta(writer.corpus, writer.lines, **named)
        ctx.stats.add("pairs_out", writer.lines)


def check_segment(pair: Pair, policy: InputPolicy, ctx: StepContext, number: int) -> Pair | None:
    """Segments from sources that do not read lines (catalogs, archives) may hold newlines or
    NUL bytes; apply the same policy as to files so alignment can never break."""
    out = []
    for text in pair:
        if "\x00" in text:
            if policy.nul == "error":
                raise DataError(
                    f"{ctx.step_id}: segment {number} contains a NUL byte "
                    "(set input.nul: strip | drop)"
                )
            if policy.nul == "drop":
                ctx.stats.add("input.nul_dropped")
                return None
            ctx.stats.add("input.nul_stripped")
            text = text.replace("\x00", "")
        if "\n" in text or INNER_BREAKS.search(text):
            if policy.inner_breaks == "error":
                raise DataError(
                    f"{ctx.step_id}: segment {number} contains a line break "
                    "(set input.inner_breaks: space | drop)"
                )
            if policy.inner_breaks == "drop":
                ctx.stats.add("input.inner_breaks_dropped")
                return None
            ctx.stats.add("input.inner_breaks_replaced")
            text = INNER_BREAKS.sub(" ", text.replace("\n", " "))
        out.append(text)
    if policy.empty != "keep" and any(not t.strip() for t in out):
        if policy.empty == "error":
            raise DataError(
                f"{ctx.step_id}: segment {number} has an empty side (set input.empty: keep | drop)"
            )
        ctx.stats.add("input.empty_dropped")
        return None
    return tuple(out)

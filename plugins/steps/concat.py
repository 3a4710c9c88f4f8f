"""Concatenates corpora in the order their inputs are listed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from mtcore.api import Corpus, CorpusWriter, PluginConfig, Step, StepContext, StepError
from mtcore.api.engine import write_corpus_meta


class ConcatConfig(PluginConfig):
    langs: list[str] | None = Field(
        None, description="column order of the output; default: the first input's languages"
    )


class ConcatStep(Step[ConcatConfig]):
    """Every input corpus must hold the output languages (columns are picked by language, so
    an ``ja-en`` corpus joins an ``en-ja`` one correctly). Counts pairs per input."""

    name = "concat"
    inputs: ClassVar[dict[str, bool]] = {"*": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)

    def volume(self, lines_in: Mapping[str, float | None]) -> dict[str, float]:
        """The sum of its inputs' lines, when every one is known."""
        known = list(lines_in.values())
        if not known or any(n is None for n in known):
            return {}
        return {"lines": float(sum(n for n in known if n is not None))}

    def run(self, ctx: StepContext) -> None:
        corpora = {role: Corpus.open(artifact.path) for role, artifact in ctx.inputs.items()}
        first = next(iter(corpora.values()))
        langs = tuple(self.config.langs or first.langs)
        with CorpusWriter(ctx.output("corpus"), langs) as writer:
            for role, corpus in corpora.items():
                missing = [lang for lang in langs if lang not in corpus.langs]
                if missing:
                    raise StepError(
                        f"{ctx.step_id}: input {role!r} has languages {corpus.langs}, not {missing}"
                    )
                columns = [corpus.langs.index(lang) for lang in langs]
                before = writer.lines
                for pair in corpus:
                    writer.write(tuple(pair[c] for c in columns))
                ctx.stats.add(f"pairs.{role}", writer.lines - before)
        # the ids of indexed test sets carry through (a test set concatenated as it came)
        named = [str(a.meta.get("dataset") or "") for a in ctx.inputs.values()]
        if all(named):
            write_corpus_meta(writer.corpus, writer.lines, dataset="+".join(dict.fromkeys(named)))
        ctx.stats.add("pairs_out", writer.lines)

"""Cleans a parallel corpus with a chain of filter plugins, sharded over the executor.

The driver cuts the input files into shards of bytes at newlines; workers decode, check and
score them (:func:`mtcore.chain.filtering.chain_task`) and send back one small verdict array per
shard; the driver applies stateful filters in corpus order and appends the kept lines, cut
out of the input bytes, to the output. No pair is ever re-encoded, so the output bytes of a
kept pair are exactly its input bytes. The engine (:func:`mtcore.chain.cleaning.clean_corpus`) does
all of that; this step writes what it returns.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import Corpus, CorpusWriter, PluginConfig, Registry, Step, StepContext, components
from mtcore.api.engine import ENGINE_KEYS, check_chain, clean_corpus, entry_name
from mtcore_plugins.steps._scores import write_reject_sample


class CleanConfig(PluginConfig):
    filters: list[dict[str, Any] | str] = Field(
        default_factory=list,
        description="filter chain: each entry {name: <filter>, <settings>} and optionally "
        "keep: {top_fraction | top_k | percentile} to rank instead of using the threshold",
        json_schema_extra=components("filters", reserved=ENGINE_KEYS[1:]),
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")
    reject_samples: int = Field(
        50, ge=0, le=100_000, description="rejected pairs kept per filter for audit"
    )


class CleanStep(Step[CleanConfig]):
    """Outputs the kept pairs (``corpus``) and, per filter, a sample of the pairs it dropped
    (``rejects/<filter>.tsv``, with the score that rejected each in ``rejects/<filter>.scores``
    where the filter has one, the key a ranked entry ranked it by); the manifest counts pairs
    in, out and dropped per filter, and the metric ``cut_score.<filter>`` of a ranked entry is
    its worst kept key.
    Inputs other than ``corpus`` are resources for filters (a language model, a test set to
    exclude), which name the input role in their settings."""

    parallel = True  # its shards go through ctx.executor

    name = "clean"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "rejects")

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        return super().check(registry) + check_chain(registry, self.config.filters, "filters")

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        c = self.config
        with CorpusWriter(ctx.output("corpus"), source.langs) as writer:
            result = clean_corpus(ctx, source, c.filters, writer, c.shard_size, c.reject_samples)
        ctx.stats.add("pairs_in", result.pairs_in)
        for label, dropped in result.dropped.items():
            ctx.stats.add(f"dropped.{label}", dropped)
        ctx.stats.add("pairs_out", result.pairs_out)
        for label, value in result.cuts.items():
            ctx.metrics[f"cut_score.{label}"] = value
        folder = ctx.output("rejects")
        for label, lines in result.rejects.items():
            write_reject_sample(folder, label, lines, result.reject_scores.get(label, []))


def _name(entry: dict[str, Any] | str) -> str:
    return str(entry_name(entry))

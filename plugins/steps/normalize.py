"""The ``normalize`` step: rewrites the text of a corpus with a chain of processor plugins,
sharded over the executor, through the core's processor engine (``process_shard`` and
``rewrite_corpus`` of :mod:`mtcore.api`). The manifest counts, per processor and per language,
the lines it changed (``changed.<label>.<lang>``) and the lines that ended up empty
(``emptied.<lang>``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import Corpus, PluginConfig, Registry, Step, StepContext, StepError, components
from mtcore.api.engine import (
    PROCESSOR_KEYS,
    check_processor_langs,
    field_specs,
    process_shard,
    rewrite_corpus,
)


class NormalizeConfig(PluginConfig):
    processors: list[dict[str, Any] | str] = Field(
        ...,
        min_length=1,
        description="processor chain, applied in order: each entry a name or {name: "
        "<processor>, langs: [sides it applies to; default all], <processor settings>}",
        json_schema_extra=components("processors", reserved=PROCESSOR_KEYS[1:]),
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")


class NormalizeStep(Step[NormalizeConfig]):
    """Outputs ``corpus``: the input with every side rewritten by the processor chain."""

    parallel = True  # its shards go through ctx.executor

    name = "normalize"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)
    streams: ClassVar[tuple[str, ...]] = ("corpus",)

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        return super().check(registry) + check_processor_langs(self.config.processors, "processors")

    def export_statement(self, inputs: dict[str, Any], out: Any) -> dict[str, Any]:
        """The processor chain in order as the recipe gives it (unset settings take the
        processors' defaults; their docstrings state the rules)."""
        return {"processors": list(self.config.processors),
                "client": "the processors in order (mtcore_plugins.processors); no common "
                "tool runs them as they are"}  # fmt: skip

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        specs = field_specs(self.config, "processors")
        for index, spec in enumerate(specs):
            missing = sorted(set(spec.get("langs") or ()) - set(source.langs))
            if missing:
                raise StepError(
                    f"processors.{index}.langs names {', '.join(missing)} but the corpus "
                    f"{source.path} has {', '.join(source.langs)}"
                )
        rewrite_corpus(ctx, source, process_shard, specs, self.config.shard_size, "normalize")

"""Rewrites one side of a corpus (the source side, say) with a chain of augmenter plugins, sharded
over the executor and resumable shard by shard: tags (``<BT>``, ``<2uk>``) and noised
self-training's input noise. The other sides are copied unchanged, and the output has exactly
one pair per input pair, in order.

``rename`` relabels columns for multilingual enhancement (HW-TSC §5.5): En→Uk pairs that join
Cs→Uk training must sit in the source column of a ``cs-uk`` corpus, so ``rename: {en: cs}``
together with a ``lang_tag`` augmenter. The manifest counts the lines each augmenter changed
(``changed.<label>``), the non-empty lines it saw (``seen.<label>``), the lines it left as
nothing but its own tokens (``bare.<label>``), what a noise augmenter did (``noise.dropped``,
``noise.shuffled``, ``noise.blanked_lines``, ...) and the lines left empty (``emptied.<lang>``).
An augmenter that collapses fails the step with these counts (:mod:`._augment_checks`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, ClassVar

from pydantic import Field, model_validator

from mtcore.api import (
    Augmenter,
    Corpus,
    RawBlock,
    Registry,
    Step,
    StepContext,
    StepError,
    components,
    load_registry,
)
from mtcore.api.engine import (
    ComponentSpec,
    ShardOutput,
    built,
    checked_lines,
    field_specs,
    rewrite_corpus,
    rewrite_shard,
)
from mtcore_plugins.common.text.augmenting import CountsLines, EmitsTokens
from mtcore_plugins.steps._augment_checks import CollapseLimits, bare_lines, check_collapse

LANG = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"


def _chain(specs: tuple[ComponentSpec, ...]) -> list[Augmenter]:
    """The augmenters of ``specs``, built once per worker process."""
    return built(specs, lambda: [spec.build(load_registry()) for spec in specs])


def augment_task(
    task: tuple[tuple[tuple[ComponentSpec, ...], str], tuple[str, ...], RawBlock],
) -> ShardOutput:
    """Runs in a worker: one shard, the chain applied to the ``side`` column only."""
    (specs, side_lang), langs, raw = task
    chain = _chain(specs)

    def rewrite(lines: list[str], side: int, lang: str, counts: Counter[str]) -> list[str]:
        if lang != side_lang:
            return lines
        for spec, plugin in zip(specs, chain, strict=True):
            out = plugin.augment(lines, lang, raw.first_line)
            out = checked_lines(out, lines, f"augmenter {spec.label!r}", raw, side, lang)
            counts[f"seen.{spec.label}"] += sum(1 for line in lines if line.strip())
            counts[f"changed.{spec.label}"] += sum(
                1 for old, new in zip(lines, out, strict=True) if old != new
            )
            emitted = plugin.emitted() if isinstance(plugin, EmitsTokens) else frozenset()
            counts[f"bare.{spec.label}"] += bare_lines(lines, out, emitted)
            if isinstance(plugin, CountsLines):
                for key, value in plugin.take_counts().items():
                    counts[f"{spec.label}.{key}"] += value
            lines = out
        return lines

    return rewrite_shard(raw, langs, rewrite)


class AugmentConfig(CollapseLimits):
    side: str = Field(
        pattern=LANG,
        description="language of the side the augmenters rewrite: the source side of the "
        "system the data trains (tags and noise go on the source)",
    )
    augmenters: list[dict[str, Any] | str] = Field(
        default_factory=list,
        max_length=32,
        description="augmenter chain, applied in order: each entry a name or {name: "
        "<augmenter>, <its settings>}",
        json_schema_extra=components("augmenters"),
    )
    rename: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        description="relabel output columns, {old: new} (multilingual enhancement: {en: cs} "
        "puts En-Uk pairs in the source column of Cs-Uk data)",
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")

    @model_validator(mode="after")
    def _does_something(self) -> AugmentConfig:
        if not self.augmenters and not self.rename:
            raise ValueError("give augmenters, rename or both: the step would copy its input")
        for old, new in self.rename.items():
            for code in (old, new):
                if not re.fullmatch(LANG, code):
                    raise ValueError(f"rename: {code!r} is not a language code (like en, pt-br)")
        if len(set(self.rename.values())) != len(self.rename):
            raise ValueError("rename: two columns would get the same name")
        return self


class AugmentStep(Step[AugmentConfig]):
    """Outputs ``corpus``: the input with its ``side`` column rewritten by the augmenters and
    its columns relabelled by ``rename``."""

    parallel = True  # its shards go through ctx.executor

    name = "augment"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)
    streams: ClassVar[tuple[str, ...]] = ("corpus",)

    def run(self, ctx: StepContext) -> None:
        c = self.config
        source = Corpus.open(ctx.inputs["corpus"].path)
        langs = source.langs
        if c.side not in langs:
            raise StepError(
                f"{ctx.step_id}: side {c.side!r} is not a language of {source.path} "
                f"(it has {', '.join(langs)})"
            )
        out_langs = output_langs(langs, c.rename, ctx.step_id, str(source.path))
        specs = field_specs(c, "augmenters")
        rewrite_corpus(
            ctx, source, augment_task, (specs, c.side), c.shard_size, "augment", out_langs
        )
        check_collapse(ctx.step_id, [spec.label for spec in specs], ctx.stats.counts, c)

    def emitted_tokens(self, registry: Registry) -> frozenset[str]:
        """The tokens the augmenters write: tags, the noise's blank token."""
        out: set[str] = set()
        for spec in field_specs(self.config, "augmenters"):
            plugin = spec.build(registry)
            if isinstance(plugin, EmitsTokens):
                out |= plugin.emitted()
        return frozenset(out)


def output_langs(
    langs: tuple[str, ...], rename: dict[str, str], step_id: str, where: str
) -> tuple[str, ...]:
    """``langs`` with ``rename`` applied; every renamed column must exist and the result must
    name each column once."""
    missing = sorted(set(rename) - set(langs))
    if missing:
        raise StepError(
            f"{step_id}: rename names {', '.join(missing)}, not a language of {where} "
            f"(it has {', '.join(langs)})"
        )
    out = tuple(rename.get(lang, lang) for lang in langs)
    if len(set(out)) != len(out):
        raise StepError(f"{step_id}: rename would give {where} the columns {list(out)}")
    return out

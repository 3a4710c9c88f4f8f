"""The filter-chain engine. Filters only score and accept; this module owns batching, chain
order, drop counters and reject samples (as datatrove's runner does for its blocks).

Chain semantics are OpusFilter's: a pair is kept when every filter accepts it, and a drop is
counted against the first filter in chain order that rejects it. Stateless filters run on
shards in worker processes; stateful ones (deduplication) run in order in the calling process
on exactly the pairs that reached them, so the result does not depend on sharding or workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mtcore.plugin import Filter, Pair
from mtcore.registry import Registry, load_registry

KEPT = -1


@dataclass(frozen=True)
class FilterSpec:
    """A filter as a recipe names it: plugin name, its settings and a label for counters."""

    name: str
    config: tuple[tuple[str, Any], ...]
    label: str

    def build(self, registry: Registry, langs: tuple[str, ...]) -> Filter:
        cls = registry.load("filters", self.name)
        plugin = cls.from_dict(dict(self.config))
        assert isinstance(plugin, Filter)
        plugin.setup(langs)
        return plugin


def make_specs(entries: Sequence[dict[str, Any]]) -> list[FilterSpec]:
    specs: list[FilterSpec] = []
    used: dict[str, int] = {}
    for entry in entries:
        name = str(entry["name"])
        used[name] = used.get(name, 0) + 1
        label = name if used[name] == 1 else f"{name}#{used[name]}"
        config = tuple(sorted((k, v) for k, v in entry.items() if k != "name"))
        specs.append(FilterSpec(name, config, label))
    return specs


_WORKER_FILTERS: dict[tuple[Any, ...], list[Filter | None]] = {}


def stateless_verdicts(
    task: tuple[tuple[FilterSpec, ...], tuple[str, ...], list[Pair]],
) -> list[int]:
    """Runs in a worker: for each pair, the chain index of the first stateless filter that
    rejects it, or KEPT. Stateful filters are skipped here (their slot is ``None``)."""
    specs, langs, batch = task
    key = (specs, langs)
    if key not in _WORKER_FILTERS:
        registry = load_registry()
        built: list[Filter | None] = []
        for spec in specs:
            plugin = spec.build(registry, langs)
            built.append(None if plugin.stateful else plugin)
        _WORKER_FILTERS[key] = built
    verdicts = [KEPT] * len(batch)
    alive = list(range(len(batch)))
    for index, slot in enumerate(_WORKER_FILTERS[key]):
        if slot is None or not alive:
            continue
        scores = slot.score([batch[i] for i in alive])
        survivors = []
        for i, score in zip(alive, scores, strict=True):
            if slot.accept(score):
                survivors.append(i)
            else:
                verdicts[i] = index
        alive = survivors
    return verdicts


class StatefulStage:
    """Applies the chain's stateful filters in corpus order, given the stateless verdicts."""

    def __init__(
        self, specs: Sequence[FilterSpec], registry: Registry, langs: tuple[str, ...]
    ) -> None:
        self.filters: dict[int, Filter] = {}
        for index, spec in enumerate(specs):
            plugin = spec.build(registry, langs)
            if plugin.stateful:
                self.filters[index] = plugin

    def resolve(self, batch: Sequence[Pair], verdicts: list[int]) -> list[int]:
        """Final verdict per pair: the first filter in chain order that rejects it."""
        final = list(verdicts)
        for index, plugin in sorted(self.filters.items()):
            reach = [i for i, v in enumerate(final) if v == KEPT or v > index]
            if not reach:
                continue
            scores = plugin.score([batch[i] for i in reach])
            for i, score in zip(reach, scores, strict=True):
                if not plugin.accept(score):
                    final[i] = index
        return final

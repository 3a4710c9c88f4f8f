"""The filter-chain engine. Filters only score and accept; this module owns batching, chain
order, drop counters, ranking and reject samples (as datatrove's runner does for its blocks).

Chain semantics are OpusFilter's: a pair is kept when every filter accepts it, and a drop is
counted against the first filter in chain order that rejects it. Stateless filters run on
shards (:class:`mtcore.text.block.TextBlock`) in worker processes; stateful ones (deduplication)
run in order in the calling process on exactly the pairs that reached them, so the result does
not depend on sharding or workers. A stateful filter's ``prepare_block`` (hashing, say) still
runs in the workers.

A chain entry may carry ``keep`` instead of relying on the filter's own threshold: the pairs
that every other filter kept are ranked by the filter's ``rank_key`` and a top fraction, a
top k or a percentile band of them is kept. Ranking needs the whole corpus, so ranked entries
come last in the chain and a step that has them reads its input twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from mtcore.chain.components import ComponentSpec, component_specs
from mtcore.chain.ranking import KeepSpec
from mtcore.contracts.components import entry_name
from mtcore.contracts.errors import PluginError
from mtcore.contracts.kinds import Filter
from mtcore.contracts.registry import Registry, load_registry
from mtcore.exec.shards import worker_memo
from mtcore.text.block import RawBlock, TextBlock
from mtcore.text.kernels import CharClasses

KEPT = -1
ENGINE_KEYS = ("name", "keep")
"""Keys of a chain entry that belong to the engine, not to the filter's settings."""


def make_specs(entries: Sequence[Any]) -> list[ComponentSpec]:
    """The specs of a filter chain; ``keep`` is the engine's key of an entry."""
    return list(component_specs("filters", entries, ENGINE_KEYS[1:]))


def keep_of(spec: ComponentSpec) -> KeepSpec | None:
    """A ranked entry's ``keep`` rule, None for a filter that uses its own threshold."""
    keep = spec.get("keep")
    return None if keep is None else KeepSpec.model_validate(keep)


def check_chain(registry: Registry, entries: Sequence[Any], where: str) -> list[tuple[str, str]]:
    """Engine-level problems of a chain: bad ``keep`` rules, a ranked entry before an
    unranked one, ranking a filter that cannot be ranked or is stateful."""
    problems: list[tuple[str, str]] = []
    seen_ranked = False
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            if seen_ranked:
                problems.append((f"{where}.{i}", "unranked filter after a ranked one (`keep`)"))
            continue
        keep = entry.get("keep")
        if keep is None:
            if seen_ranked:
                problems.append(
                    (
                        f"{where}.{i}",
                        "filters with `keep` rank the pairs every other filter kept: "
                        "list them last in the chain",
                    )
                )
            continue
        seen_ranked = True
        try:
            KeepSpec.model_validate(keep)
        except ValidationError as exc:
            for error in exc.errors():
                loc = ".".join(str(p) for p in error["loc"])
                problems.append((f"{where}.{i}.keep{'.' + loc if loc else ''}", error["msg"]))
        try:
            cls = registry.load("filters", str(entry_name(entry)))
        except PluginError:
            continue  # reported by check_components
        if cls.stateful or cls.higher_is_better is None:
            problems.append((f"{where}.{i}.keep", f"filter {entry_name(entry)!r} cannot be ranked"))
    return problems


# --- the worker side ------------------------------------------------------------------------


@dataclass
class ShardResult:
    """What a worker sends back for one shard: the first stateless filter rejecting each pair
    (or KEPT), stateful filters' prepared items for the rows they may see, ranked filters'
    keys (NaN where not reached) and, in score mode, every filter's scores."""

    verdicts: np.ndarray
    prepared: dict[int, tuple[np.ndarray, Any]] = field(default_factory=dict)
    keys: dict[int, np.ndarray] = field(default_factory=dict)
    scores: dict[int, np.ndarray] = field(default_factory=dict)
    rejected: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Per stateless filter, the first :data:`REJECTED_SCORES` rows it rejected in the shard
    and their scores (a row per pair, a column per score): the run page and the clean step's
    samples show why a pair was dropped."""


REJECTED_SCORES = 256


class Chain:
    """The built filters of a chain, once per process."""

    def __init__(
        self,
        specs: Sequence[ComponentSpec],
        registry: Registry,
        langs: tuple[str, ...],
        resources: Mapping[str, Path] | None = None,
    ) -> None:
        self.specs = tuple(specs)
        self.langs = langs
        self.filters = [spec.build(registry, langs, resources) for spec in specs]
        self.classes = CharClasses([chars for f in self.filters for chars in f.char_classes])
        ranked = {i: keep_of(spec) for i, spec in enumerate(specs)}
        self.ranked = {i: keep for i, keep in ranked.items() if keep is not None}

    def run_stateless(self, block: TextBlock) -> ShardResult:
        n = len(block)
        verdicts = np.full(n, KEPT, dtype=np.int16)
        alive = np.arange(n)
        result = ShardResult(verdicts)
        for index, plugin in enumerate(self.filters):
            if not len(alive):
                break
            if plugin.stateful:
                sub = block if len(alive) == n else block.take(alive)
                result.prepared[index] = (alive.copy(), plugin.prepare_block(sub))
                continue
            scores = _score(plugin, block, alive)
            keep = self.ranked.get(index)
            if keep is not None and not keep.threshold_too:
                result.keys[index] = _keys(plugin, scores, alive, n)
                continue
            ok = np.asarray(plugin.accept_block(scores), dtype=bool)
            if ok.shape != (len(alive),):
                raise PluginError(
                    f"filter {self.specs[index].name!r} accepted {ok.shape} values for "
                    f"{len(alive)} pairs"
                )
            verdicts[alive[~ok]] = index
            if not ok.all():
                _keep_rejected(result, index, alive, ok, scores)
            if keep is not None:
                result.keys[index] = _keys(plugin, _take(scores, ok), alive[ok], n)
            alive = alive[ok]
        return result

    def run_scores(self, block: TextBlock) -> ShardResult:
        """Score mode: every filter scores every pair; nothing is dropped."""
        result = ShardResult(np.full(len(block), KEPT, dtype=np.int16))
        everything = np.arange(len(block))
        for index, plugin in enumerate(self.filters):
            if plugin.stateful:
                raise PluginError(
                    f"filter {self.specs[index].name!r} is stateful: it has no per-pair score"
                )
            result.scores[index] = _as_score_array(
                _score(plugin, block, everything), self.specs[index].name
            )
        return result


def _score(plugin: Filter, block: TextBlock, rows: np.ndarray) -> Any:
    """Scores of ``rows``: array filters score those rows of the whole block (cheaper than
    building a sub-block), the others score a sub-block of just those rows."""
    if plugin.whole_blocks():
        if len(rows) == len(block):
            return plugin.score_block(block)
        return plugin.score_rows(block, rows)
    sub = block if len(rows) == len(block) else block.take(rows)
    scores = plugin.score_block(sub)
    if len(scores) != len(rows):
        raise PluginError(
            f"filter {plugin.name!r} returned {len(scores)} scores for {len(rows)} pairs"
        )
    return scores


def _keep_rejected(
    result: ShardResult, index: int, alive: np.ndarray, ok: np.ndarray, scores: Any
) -> None:
    bad = np.flatnonzero(~ok)[:REJECTED_SCORES]
    try:
        values = _as_score_array(_take(scores, np.isin(np.arange(len(ok)), bad)), "")
    except PluginError:  # scores that are not numbers: the sample shows no score
        return
    if values.shape[0] == len(bad):
        result.rejected[index] = (alive[bad], values)


def _keys(plugin: Filter, scores: Any, rows: np.ndarray, n: int) -> np.ndarray:
    keys = np.full(n, np.nan)
    keys[rows] = plugin.rank_key(scores)
    return keys


def _take(scores: Any, ok: np.ndarray) -> Any:
    if isinstance(scores, np.ndarray):
        return scores[ok]
    return [s for s, good in zip(scores, ok, strict=True) if good]


def _as_score_array(scores: Any, name: str) -> np.ndarray:
    try:
        values = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PluginError(f"filter {name!r} has scores that are not numbers: {exc}") from None
    return values if values.ndim > 1 else values.reshape(-1, 1)


def _chain(
    specs: tuple[ComponentSpec, ...], langs: tuple[str, ...], resources: tuple[tuple[str, str], ...]
) -> Chain:
    """The filter chain of a shard task, built once per worker process."""
    paths = {role: Path(path) for role, path in resources}
    return worker_memo(
        (specs, langs, resources), lambda: Chain(specs, load_registry(), langs, paths)
    )


ChainTask = tuple[tuple[ComponentSpec, ...], tuple[str, ...], tuple[tuple[str, str], ...], RawBlock]


def chain_task(task: ChainTask) -> ShardResult:
    """Runs in a worker: decode and check one shard, apply the stateless part of the chain."""
    specs, langs, resources, raw = task
    chain = _chain(specs, langs, resources)
    return chain.run_stateless(raw.decode(langs, chain.classes))


def score_task(task: ChainTask) -> ShardResult:
    specs, langs, resources, raw = task
    chain = _chain(specs, langs, resources)
    return chain.run_scores(raw.decode(langs, chain.classes))


# --- the driver side ------------------------------------------------------------------------


def chain_resources(inputs: Mapping[str, Any], main: str = "corpus") -> tuple[tuple[str, str], ...]:
    """A step's inputs other than ``main``, as (role, artifact directory): the resources its
    filters may name (a language model, held-out sets)."""
    return tuple(sorted((role, str(a.path)) for role, a in inputs.items() if role != main))


class StatefulStage:
    """Applies the chain's stateful filters in corpus order to worker results."""

    def __init__(
        self,
        specs: Sequence[ComponentSpec],
        registry: Registry,
        langs: tuple[str, ...],
        resources: Mapping[str, Path] | None = None,
    ) -> None:
        self.filters: dict[int, Filter] = {}
        for index, spec in enumerate(specs):
            if registry.load("filters", spec.name).stateful:
                self.filters[index] = spec.build(registry, langs, resources)

    def resolve(self, result: ShardResult) -> np.ndarray:
        """Final verdict per pair: the first filter in chain order that rejects it."""
        final = result.verdicts.copy()
        for index, plugin in sorted(self.filters.items()):
            if index not in result.prepared:
                continue
            rows, items = result.prepared[index]
            current = final[rows]
            reach = (current == KEPT) | (current > index)
            if not reach.any():
                continue
            chosen = np.flatnonzero(reach)
            scores = plugin.score(_subset(items, chosen))
            ok = np.asarray(plugin.accept_block(scores), dtype=bool)
            final[rows[chosen[~ok]]] = index
        return final


def _subset(items: Any, chosen: np.ndarray) -> Any:
    if isinstance(items, np.ndarray):
        return items[chosen]
    return [items[i] for i in chosen]

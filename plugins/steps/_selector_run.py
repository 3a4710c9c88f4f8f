"""What the ``selection`` step and its older spellings ``knn_select`` and ``topic_select``
share: running one selector over the ``corpus`` input and cutting by a budget."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from mtcore.api import Corpus, PluginError, Registry, Selector, StepContext
from mtcore.api.engine import Budget, component_specs, select_pool
from mtcore_plugins.steps._scores import write_kept, write_rejects, write_scores


class SelectorRun:
    """Mixin of a step (``class SelectionStep(SelectorRun, Step[SelectionConfig])``) that runs
    one selector over the ``corpus`` input: fit the selector on the other inputs, score the
    pool, cut by a budget, write the outputs (``rejects``: the first pairs each cut dropped,
    with their scores, as the clean step writes them). ``selection`` reads the selector and
    budget from its settings; the older ``knn_select`` and ``topic_select`` derive both from
    theirs and write their own tables beside."""

    parallel = True  # its shards go through ctx.executor

    @abstractmethod
    def selector_entry(self) -> dict[str, Any]:
        """The selector as ``{name: ..., <its settings>}``."""

    @abstractmethod
    def budget(self) -> Budget:
        """What of the selector's candidates is kept."""

    def selector(self, registry: Registry) -> Selector:
        """The configured selector plugin (not yet fitted)."""
        (spec,) = component_specs("selectors", [self.selector_entry()])
        try:
            plugin = spec.configured(registry)
        except TypeError as exc:  # an abstract method left out
            raise PluginError(f"selector {spec.name!r} cannot be built: {exc}") from exc
        assert isinstance(plugin, Selector)  # configured() checked the contract
        return plugin

    def run(self, ctx: StepContext) -> None:
        pool = Corpus.open(ctx.inputs["corpus"].path)
        selector = self.selector(ctx.registry)
        inputs = {role: art.path for role, art in ctx.inputs.items() if role != "corpus"}
        missing = [role for role in selector.roles() if role not in inputs]
        if missing:
            have = ", ".join(sorted(inputs)) or "none besides corpus"
            raise PluginError(
                f"{ctx.step_id}: selector {selector.name!r} reads the step inputs {missing}; "
                f"connect them under the step's inputs (connected: {have})"
            )
        selector.fit(ctx, pool, inputs)
        selection = select_pool(ctx, pool, selector, self.budget())
        write_kept(ctx.output("corpus"), pool, selection.keep)
        write_rejects(ctx.output("rejects"), pool, selection.dropped, selection.scores)
        self.write(ctx, selector, selection.keep, selection.scores)
        for key, count in selection.counts.items():
            ctx.stats.add(key, count)
        kept = selection.scores[selection.keep]
        finite = kept[~np.isnan(kept)]
        if len(finite):
            worst = finite.min() if selector.higher_is_better else finite.max()
            ctx.metrics["cut_score"] = float(worst)

    def write(
        self, ctx: StepContext, selector: Selector, keep: np.ndarray, scores: np.ndarray
    ) -> None:
        """The outputs besides ``corpus`` (every pair's ``scores``, the ``keep`` mask): by
        default ``scores``, the kept pairs' scores."""
        kept = scores[keep]
        write_scores(ctx.output("scores"), [selector.name], kept[:, None])

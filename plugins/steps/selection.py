"""Runs any selector plugin over a pool: fit it once, score every pair, cut by a budget.

The pool is the ``corpus`` input; every other input is passed to the selector's ``fit`` under
its role (a domain set, a test set, kenlm models), so a selector names the roles it reads in
its own settings. The budget is this step's ``threshold`` and/or one rank rule (``top_k``,
``top_fraction``, ``percentile``), applied by the core's selection engine
(:func:`mtcore.api.select_pool`): ties at a boundary go to the earlier pair, a NaN score fails
every threshold and ranks last. A selector that picks its own candidates (``knn``: the
neighbours of the domain sentences; ``topic``: pairs sharing topic terms) is cut among them.

NT5 §3.3's two selections as two steps::

    ml_top: {kind: selection, inputs: {corpus: pool, in_domain: lm_in, general: lm_gen},
             selector: {name: moore_lewis, side: target}, top_k: 20000}
    knn: {kind: selection, inputs: {corpus: pool, domain: dev},
          selector: {name: knn, k: 10, lang: ja}, top_k: 4000}
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import Step, components
from mtcore.api.engine import Budget, entry_dict
from mtcore_plugins.steps._selector_run import SelectorRun


class SelectionConfig(Budget):
    selector: str | dict[str, Any] = Field(
        description="the selector plugin: its name, or {name: <selector>, <its settings>}",
        json_schema_extra=components("selectors"),
    )


class SelectionStep(SelectorRun, Step[SelectionConfig]):
    """Outputs ``corpus`` (the kept pairs, in corpus order, bytes unchanged) and ``scores``
    (their scores, one column named after the selector), and ``rejects`` (the first pairs
    each cut dropped, with their scores). Counts ``pairs_in``, ``pairs_out``,
    ``dropped.selector`` (not a candidate of the selector), ``dropped.threshold`` and
    ``dropped.rank``; the metric ``cut_score`` is the worst score kept."""

    name = "selection"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores", "rejects")

    def selector_entry(self) -> dict[str, Any]:
        return dict(entry_dict(self.config.selector))

    def budget(self) -> Budget:
        return self.config

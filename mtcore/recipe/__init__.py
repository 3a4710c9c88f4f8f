"""Recipes: loading and validation (:mod:`.load`), the graph's references (:mod:`.graph`),
profiles and ``--set`` overrides, stable hashes, the plan, and ablations.

``mtcore.recipe`` was one module before the core was laid out by concern; its names still
resolve here, with a deprecation warning, for a deprecation period.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from mtcore._moved import forward

    return forward(__name__, "mtcore.recipe.load", name)

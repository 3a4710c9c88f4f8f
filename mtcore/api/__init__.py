"""mtcore's public plugin API: the stable names a plugin (built-in or third-party) imports.

A plugin imports from here and nowhere else in ``mtcore``: ``tests/test_lint.py`` fails on any
other import of ``mtcore`` in the example packages, and the built-in plugins may import
:mod:`mtcore.api.engine` besides, so the core's modules can move without breaking anyone's
package. These names keep working, or warn for a release before they go; docs/plugins.md
says what each one is, and ``tests/test_lint.py`` holds them to at most 40, each documented.

The names load on first use (PEP 562): ``from mtcore.api import Filter`` costs what importing
``mtcore.contracts.kinds`` costs, not the whole core (NumPy, numba). ``_WHERE`` says where each
name is defined; the ``TYPE_CHECKING`` block below lists the same names for type checkers, as
re-exports (``tests/test_lint.py`` checks that the two agree).

A name of :mod:`mtcore.api.engine` (what only the built-in plugins use) imported from here
still works for one release, with a ``DeprecationWarning`` that names its new module.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

#: Each public name and the module that defines it.
_WHERE: dict[str, str] = {
    "Selector": "mtcore.chain.selection",
    "components": "mtcore.contracts.components",
    "DataError": "mtcore.contracts.errors",
    "MtcoreError": "mtcore.contracts.errors",
    "PluginError": "mtcore.contracts.errors",
    "StepError": "mtcore.contracts.errors",
    "hookimpl": "mtcore.contracts.hooks",
    "HASHED_WHEN_SET": "mtcore.contracts.identity",
    "NOT_IDENTITY": "mtcore.contracts.identity",
    "Augmenter": "mtcore.contracts.kinds",
    "Executor": "mtcore.contracts.kinds",
    "Filter": "mtcore.contracts.kinds",
    "Metric": "mtcore.contracts.kinds",
    "Model": "mtcore.contracts.kinds",
    "Processor": "mtcore.contracts.kinds",
    "Scorer": "mtcore.contracts.kinds",
    "Source": "mtcore.contracts.kinds",
    "Tuner": "mtcore.contracts.kinds",
    "ConfigT": "mtcore.contracts.plugin",
    "Pair": "mtcore.contracts.plugin",
    "PluginConfig": "mtcore.contracts.plugin",
    "Registry": "mtcore.contracts.registry",
    "load_registry": "mtcore.contracts.registry",
    "Scheduler": "mtcore.contracts.scheduler",
    "Stats": "mtcore.contracts.stats",
    "Artifact": "mtcore.contracts.step",
    "Step": "mtcore.contracts.step",
    "StepContext": "mtcore.contracts.step",
    "write_artifact_meta": "mtcore.contracts.step",
    "Corpus": "mtcore.data.corpus",
    "CorpusWriter": "mtcore.data.corpus",
    "map_shards": "mtcore.exec.shards",
    "worker_memo": "mtcore.exec.shards",
    "cache_home": "mtcore.recipe.hashing",
    "content_hash": "mtcore.recipe.hashing",
    "Score": "mtcore.system.metrics",
    "BlockReader": "mtcore.text.block",
    "RawBlock": "mtcore.text.block",
    "TextBlock": "mtcore.text.block",
    "TextColumn": "mtcore.text.block",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    engine = importlib.import_module("mtcore.api.engine")
    if name in engine.__all__:
        warnings.warn(
            f"mtcore.api.{name} has moved to mtcore.api.engine (provisional: it may change "
            f"without deprecation); import it from there: mtcore.api stops re-exporting it "
            f"in the next release",
            DeprecationWarning,
            stacklevel=2,  # the importing line: warnings skips the import system's frames
        )
        return getattr(engine, name)
    raise AttributeError(f"mtcore.api has no {name!r}: its public names are mtcore.api.__all__")


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from mtcore.chain.selection import (
        Selector as Selector,
    )
    from mtcore.contracts.components import (
        components as components,
    )
    from mtcore.contracts.errors import (
        DataError as DataError,
        MtcoreError as MtcoreError,
        PluginError as PluginError,
        StepError as StepError,
    )
    from mtcore.contracts.hooks import (
        hookimpl as hookimpl,
    )
    from mtcore.contracts.identity import (
        HASHED_WHEN_SET as HASHED_WHEN_SET,
        NOT_IDENTITY as NOT_IDENTITY,
    )
    from mtcore.contracts.kinds import (
        Augmenter as Augmenter,
        Executor as Executor,
        Filter as Filter,
        Metric as Metric,
        Model as Model,
        Processor as Processor,
        Scorer as Scorer,
        Source as Source,
        Tuner as Tuner,
    )
    from mtcore.contracts.plugin import (
        ConfigT as ConfigT,
        Pair as Pair,
        PluginConfig as PluginConfig,
    )
    from mtcore.contracts.registry import (
        Registry as Registry,
        load_registry as load_registry,
    )
    from mtcore.contracts.scheduler import (
        Scheduler as Scheduler,
    )
    from mtcore.contracts.stats import (
        Stats as Stats,
    )
    from mtcore.contracts.step import (
        Artifact as Artifact,
        Step as Step,
        StepContext as StepContext,
        write_artifact_meta as write_artifact_meta,
    )
    from mtcore.data.corpus import (
        Corpus as Corpus,
        CorpusWriter as CorpusWriter,
    )
    from mtcore.exec.shards import (
        map_shards as map_shards,
        worker_memo as worker_memo,
    )
    from mtcore.recipe.hashing import (
        cache_home as cache_home,
        content_hash as content_hash,
    )
    from mtcore.system.metrics import (
        Score as Score,
    )
    from mtcore.text.block import (
        BlockReader as BlockReader,
        RawBlock as RawBlock,
        TextBlock as TextBlock,
        TextColumn as TextColumn,
    )

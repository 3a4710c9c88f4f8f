"""Imports that wait for first use. Importing fairseq imports every fairseq task and criterion,
and two of them (``audio_classification``, ``sentence_prediction``) import scikit-learn's and
SciPy's statistics at module level: 0.9 of the 2.7 seconds ``fairseq_cli.train`` takes to
import on this project's CPU machine, paid again by every training subprocess, though no
translation task calls them. While fairseq imports, those modules are stand-ins whose names
import the real module when first used; afterwards the stand-ins leave ``sys.modules``, so a
later ``import sklearn`` gets the real one."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# What fairseq 0.12's tasks and criterions import at module level and only call on use.
HEAVY = ("sklearn", "sklearn.metrics", "scipy.stats")


class _Later:
    """A name from a deferred module: resolved (imported) when called or read."""

    def __init__(self, module: str, name: str) -> None:
        self._module = module
        self._name = name
        self._real: Any = None

    def _target(self) -> Any:
        if self._real is None:
            module = importlib.import_module(self._module)
            real = getattr(module, self._name, None)
            if real is None:  # a submodule not imported yet (``from sklearn import metrics``)
                real = importlib.import_module(f"{self._module}.{self._name}")
            self._real = real
        return self._real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._target(), name)

    def __repr__(self) -> str:
        return f"<deferred {self._module}.{self._name}>"


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Later(self.__name__, name)


@contextmanager
def deferred(names: tuple[str, ...] = HEAVY) -> Iterator[None]:
    """Within the block, ``names`` not yet imported are stand-ins (see the module text)."""
    placed = {name: _StandIn(name) for name in names if name not in sys.modules}
    for name, module in placed.items():
        module.__path__ = []  # a package, so that ``import a.b`` finds ``a.b`` below it
        sys.modules[name] = module
    try:
        yield
    finally:
        for name, module in placed.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent and getattr(sys.modules.get(parent), child, None) is module:
                delattr(sys.modules[parent], child)

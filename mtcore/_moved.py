"""The module paths of mtcore before its core was laid out by concern (issue 49), kept working
for a deprecation period.

``import mtcore.corpus`` still gives the module, now :mod:`mtcore.data.corpus` (the same module
object, so state and monkeypatches are shared), with a :class:`DeprecationWarning` that names
the public import: a plugin imports from :mod:`mtcore.api`, and nothing else of ``mtcore``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

#: Each old module path and where the module is now.
MOVED: dict[str, str] = {
    "mtcore.plugin": "mtcore.contracts.plugin",
    "mtcore.step": "mtcore.contracts.step",
    "mtcore.scheduling": "mtcore.contracts.scheduler",
    "mtcore.errors": "mtcore.contracts.errors",
    "mtcore.stats": "mtcore.contracts.stats",
    "mtcore.hooks": "mtcore.contracts.hooks",
    "mtcore.registry": "mtcore.contracts.registry",
    "mtcore.results": "mtcore.contracts.results",
    "mtcore.recipe_graph": "mtcore.recipe.graph",
    "mtcore.overrides": "mtcore.recipe.overrides",
    "mtcore.hashing": "mtcore.recipe.hashing",
    "mtcore.plan": "mtcore.recipe.plan",
    "mtcore.ablation": "mtcore.recipe.ablation",
    "mtcore.runner": "mtcore.run.runner",
    "mtcore.driver": "mtcore.run.driver",
    "mtcore.jobs": "mtcore.run.jobs",
    "mtcore.cache": "mtcore.run.cache",
    "mtcore.schedule": "mtcore.run.schedule",
    "mtcore.plan_cost": "mtcore.run.plan_cost",
    "mtcore.display": "mtcore.run.display",
    "mtcore.report": "mtcore.run.report",
    "mtcore.resources": "mtcore.run.resources",
    "mtcore.compare": "mtcore.run.compare",
    "mtcore.shards": "mtcore.exec.shards",
    "mtcore.process": "mtcore.exec.process",
    "mtcore.launcher": "mtcore.exec.launcher",
    "mtcore.zygote": "mtcore.exec.zygote",
    "mtcore.files": "mtcore.exec.files",
    "mtcore.corpus": "mtcore.data.corpus",
    "mtcore.corpus_read": "mtcore.data.read",
    "mtcore.ingest": "mtcore.data.ingest",
    "mtcore.formats": "mtcore.data.formats",
    "mtcore.archives": "mtcore.data.archives",
    "mtcore.textblock": "mtcore.text.block",
    "mtcore.textkernels": "mtcore.text.kernels",
    "mtcore.components": "mtcore.chain.components",
    "mtcore.filtering": "mtcore.chain.filtering",
    "mtcore.fitting": "mtcore.chain.fitting",
    "mtcore.cleaning": "mtcore.chain.cleaning",
    "mtcore.ranking": "mtcore.chain.ranking",
    "mtcore.selection": "mtcore.chain.selection",
    "mtcore.metrics": "mtcore.system.metrics",
    "mtcore.inference": "mtcore.system.inference",
    "mtcore.export": "mtcore.system.export",
    "mtcore.cli_common": "mtcore.cli.common",
    "mtcore.cli_entry": "mtcore.cli.__main__",
    "mtcore.cli_translate": "mtcore.cli.translate",
}


def advice(old: str, new: str, public_of: str = "", names: list[str] | None = None) -> str:
    """The warning's text: where the module (or name) is now and which names of the module
    ``public_of`` (``new`` if not given) the public API has."""
    from mtcore.api import _WHERE

    public_of = public_of or new
    public = sorted(name for name, module in _WHERE.items() if module == public_of)
    if names is not None:
        public = [name for name in public if name in names] or public
    if public:
        shown = ", ".join(public[:6]) + (", ..." if len(public) > 6 else "")
        how = f"import {shown} from mtcore.api"
    else:
        how = "it is internal: plugins import from mtcore.api only"
    return f"{old} is deprecated and now lives at {new}; {how}"


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        warnings.warn(advice(self.old, self.new), DeprecationWarning, stacklevel=2)
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was imported under its new path."""


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths (last on ``sys.meta_path``, so a real module always wins)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname, new))


def install() -> None:
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())


def forward(package: str, module: str, name: str) -> Any:
    """A package's ``__getattr__`` for the names its old flat module (now ``module``) had."""
    if name.startswith("__"):
        raise AttributeError(name)
    value = getattr(importlib.import_module(module), name, _MISSING)
    if value is _MISSING:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(
        advice(f"{package}.{name}", f"{module}.{name}", public_of=module, names=[name]),
        DeprecationWarning,
        stacklevel=3,
    )
    vars(sys.modules[package])[name] = value  # one warning, as for a module
    return value


_MISSING = object()

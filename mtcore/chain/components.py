"""Component chains: the one spec type of every chain a step runs (filters, processors,
augmenters, rerank scorers) and of a step's one selector.

A recipe writes a chain as a list of entries, each a plugin name or a mapping with ``name``,
the plugin's settings, and keys that belong to the step or engine running the chain (a
filter's ``keep``, a processor's ``langs``, a scorer's ``feature``). :func:`component_specs` turns
the list into :class:`ComponentSpec` values once, in the driver: hashable and picklable, so
they travel to worker processes, where :func:`built` makes the plugins once per process
(:func:`mtcore.exec.shards.worker_memo`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mtcore.chain.selection import Selector
from mtcore.contracts.components import component_fields, entry_dict, entry_settings
from mtcore.contracts.errors import PluginError
from mtcore.contracts.kinds import Augmenter, CorpusFit, Filter, Processor, Scorer
from mtcore.contracts.plugin import Plugin
from mtcore.contracts.registry import SINGULAR, Registry
from mtcore.exec.shards import worker_memo

CONTRACTS: dict[str, type[Plugin]] = {
    "filters": Filter,
    "processors": Processor,
    "augmenters": Augmenter,
    "scorers": Scorer,
    "selectors": Selector,
}


@dataclass(frozen=True)
class ComponentSpec:
    """A chain entry: the plugin's kind and name, its settings and the entry's engine keys
    (frozen: hashable, picklable, native types kept), a label for counters and columns
    (``html``, ``html#2`` for a second html entry, or the entry's own label key) and, for a
    filter fitted on the corpus, the fit's directory (:mod:`mtcore.chain.fitting`)."""

    kind: str
    name: str
    label: str
    settings: tuple[tuple[str, Any], ...] = ()
    engine: tuple[tuple[str, Any], ...] = ()
    fitted: str | None = None

    def values(self) -> dict[str, Any]:
        """The plugin's settings."""
        return {key: thaw(value) for key, value in self.settings}

    def get(self, key: str, default: Any = None) -> Any:
        """One of the entry's engine keys."""
        return next((thaw(value) for k, value in self.engine if k == key), default)

    def plugin_class(self, registry: Registry) -> type[Any]:
        return registry.load(self.kind, self.name)

    def configured(self, registry: Registry) -> Any:
        """The plugin with its settings validated, before any ``setup``."""
        plugin = self.plugin_class(registry).from_dict(self.values())
        contract = CONTRACTS.get(self.kind)
        if contract is not None and not isinstance(plugin, contract):
            raise PluginError(
                f"{SINGULAR[self.kind]} {self.name!r} does not implement the "
                f"{contract.__name__} contract (mtcore.api.{contract.__name__})"
            )
        return plugin

    def build(self, registry: Registry, *setup: Any) -> Any:
        """The plugin configured, then ``setup(*setup)`` when given (a filter's languages and
        resources, a scorer's), then its corpus fit loaded where it has one."""
        plugin = self.configured(registry)
        if setup:
            plugin.setup(*setup)
        if self.fitted is not None and isinstance(plugin, CorpusFit):
            plugin.use_fit(Path(self.fitted))
        return plugin


def component_specs(
    kind: str, entries: Sequence[Any], engine_keys: Sequence[str] = (), label_key: str = ""
) -> tuple[ComponentSpec, ...]:
    """The specs of a chain's entries, in order. ``engine_keys`` are the keys that are not the
    plugin's settings; an entry's ``label_key`` value, when given, is its label."""
    specs = []
    used: dict[str, int] = {}
    for entry in entries:
        entry = entry_dict(entry)
        name = str(entry["name"])
        used[name] = used.get(name, 0) + 1
        label = name if used[name] == 1 else f"{name}#{used[name]}"
        if label_key and entry.get(label_key):
            label = str(entry[label_key])
        settings = entry_settings(entry, engine_keys)
        engine = {k: v for k, v in entry.items() if k in engine_keys}
        specs.append(ComponentSpec(kind, name, label, _frozen(settings), _frozen(engine)))
    return tuple(specs)


def field_specs(config: BaseModel, field: str) -> tuple[ComponentSpec, ...]:
    """The chain of a step's setting ``field``, as its :func:`~mtcore.api.components` mark
    declares it (the kind, the entry keys reserved for the step, the label key): the one place
    a step's chain specs come from."""
    for found in component_fields(config):
        if found.field == field:
            return component_specs(found.kind, found.entries, found.reserved, found.label_key)
    if field in type(config).model_fields and getattr(config, field) is None:
        return ()
    raise PluginError(f"{type(config).__name__}.{field} is not a setting marked components(...)")


def built(specs: tuple[ComponentSpec, ...], make: Callable[[], list[Any]]) -> Any:
    """``make()`` (the chain's plugins) once per worker process for these specs."""
    return worker_memo(specs, make)


def _frozen(values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((key, freeze(value)) for key, value in values.items()))


def freeze(value: Any) -> Any:
    """A hashable copy of a setting: dicts and lists become tagged tuples (a dict's keys may be
    any type, e.g. char_repetition's ``limits: {1: 4}``)."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: (type(kv[0]).__name__, kv[0]))
        return ("__dict__", *((k, freeze(v)) for k, v in items))
    if isinstance(value, list):
        return ("__list__", *(freeze(v) for v in value))
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, tuple) and value:
        if value[0] == "__list__":
            return [thaw(v) for v in value[1:]]
        if value[0] == "__dict__":
            return {k: thaw(v) for k, v in value[1:]}
    return value

"""Plugin lookup by short name inside the entry-point groups ``mtcore.<kind>``.

Listing reads entry-point metadata only, so ``mtcore plugins`` never imports a plugin module
(and so never torch or fairseq). Loading one plugin imports the very entry point the listing found
(stevedore's driver pattern: a short user-visible name inside an internal namespace). stevedore
itself is not used to load: it caches each group's entry points for the life of the process, so a
plugin installed after the first lookup (``pip install`` from a running notebook, a test adding a
folder to ``sys.path``) would be listed by :func:`load_registry` yet not found
(``tests/core/contracts/test_registry.py`` shows stevedore 5.5's ``DriverManager`` missing such a
plugin).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from mtcore.contracts.errors import PluginError

KINDS: tuple[str, ...] = (
    "sources",
    "filters",
    "processors",
    "selectors",
    "augmenters",
    "models",
    "scorers",
    "tuners",
    "metrics",
    "steps",
    "executors",
    "schedulers",
)

SINGULAR = {kind: kind[:-1] for kind in KINDS}


@dataclass(frozen=True)
class PluginInfo:
    """What the entry-point metadata says of one plugin, without importing it."""

    kind: str
    name: str
    target: str
    dist: str
    version: str


def group(kind: str) -> str:
    if kind not in KINDS:
        raise PluginError(f"Unknown plugin kind {kind!r}. {suggest(kind, KINDS, 'Valid kinds')}")
    return f"mtcore.{kind}"


LISTED = 12
"""Names an error lists at most: a recipe of 500 steps would otherwise print them all."""


def suggest(name: str, choices: Any, label: str = "Valid names") -> str:
    """``Did you mean 'x'?`` when a close match exists, else the list of valid names (the
    :data:`LISTED` most like ``name`` when there are more)."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if close:
        return f"Did you mean {close[0]!r}?"
    if len(choices) > LISTED:
        nearest = difflib.get_close_matches(name, choices, n=LISTED, cutoff=0.0)
        return f"{label}, the {LISTED} nearest of {len(choices)}: {', '.join(nearest)}."
    return f"{label}: {', '.join(choices) if choices else '(none installed)'}."


class Registry:
    """Entry-point view of every installed plugin; built fresh by :func:`load_registry`."""

    def __init__(self, infos: list[PluginInfo]) -> None:
        self._by_kind: dict[str, dict[str, list[PluginInfo]]] = {k: {} for k in KINDS}
        for info in infos:
            self._by_kind[info.kind].setdefault(info.name, []).append(info)
        self._loaded: dict[tuple[str, str], type[Any]] = {}

    def names(self, kind: str) -> list[str]:
        group(kind)
        return sorted(self._by_kind[kind])

    def info(self, kind: str, name: str) -> PluginInfo:
        group(kind)
        claims = self._by_kind[kind].get(name)
        if not claims:
            noun = SINGULAR[kind]
            raise PluginError(
                f"Unknown {noun} {name!r}. {suggest(name, self._by_kind[kind], f'Known {kind}')}"
            )
        if len({(c.dist, c.target) for c in claims}) > 1:
            who = ", ".join(f"{c.dist} ({c.target})" for c in claims)
            raise PluginError(
                f"{SINGULAR[kind].capitalize()} {name!r} is claimed by more than one package: "
                f"{who}. Uninstall one of them."
            )
        return claims[0]

    def has(self, kind: str, name: str) -> bool:
        return name in self._by_kind.get(kind, {})

    def load(self, kind: str, name: str) -> type[Any]:
        """Import and return the plugin class; checks that its ``name`` matches."""
        key = (kind, name)
        if key in self._loaded:
            return self._loaded[key]
        info = self.info(kind, name)
        entry = metadata.EntryPoint(name=name, value=info.target, group=group(kind))
        try:
            cls = entry.load()
        except Exception as exc:  # an import error, a missing attribute: name the plugin
            raise PluginError(
                f"Could not load {SINGULAR[kind]} {name!r} ({info.target}, from {info.dist}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if getattr(cls, "name", None) != name:
            raise PluginError(
                f"{info.target} is registered as {SINGULAR[kind]} {name!r} but its class says "
                f"name = {getattr(cls, 'name', None)!r}; they must be equal."
            )
        self._loaded[key] = cls
        return cls

    def declaring(self, kind: str, flag: str) -> type[Any]:
        """The one plugin of ``kind`` whose class sets ``flag`` (class metadata such as
        ``Step.fetches``): the core finds a role's plugin by what it declares, never by name.
        Loads every plugin of the kind once; one that fails to load is named if none is found."""
        found, broken = [], []
        for name in self.names(kind):
            try:
                cls = self.load(kind, name)
            except PluginError as exc:
                broken.append(str(exc))
                continue
            if getattr(cls, flag, False) is True:
                found.append(cls)
        if len(found) == 1:
            return found[0]
        if found:
            names = ", ".join(f"{c.name} ({self.info(kind, c.name).dist})" for c in found)
            raise PluginError(
                f"more than one {SINGULAR[kind]} declares {flag} = True: {names}. Uninstall "
                "all but one of them."
            )
        reason = f" ({'; '.join(broken)})" if broken else ""
        raise PluginError(f"no installed {SINGULAR[kind]} declares {flag} = True{reason}")

    def version(self, kind: str, name: str) -> str:
        info = self.info(kind, name)
        return f"{info.dist}=={info.version}"


def load_registry() -> Registry:
    """Read every ``mtcore.*`` entry point of the installed distributions."""
    infos: list[PluginInfo] = []
    seen: set[tuple[str, str, str, str]] = set()
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"] or "?"
        for ep in dist.entry_points:
            if not ep.group.startswith("mtcore."):
                continue
            kind = ep.group.split(".", 1)[1]
            if kind not in KINDS:
                continue
            key = (kind, ep.name, dist_name, ep.value)
            if key in seen:  # one distribution visible twice on sys.path
                continue
            seen.add(key)
            infos.append(PluginInfo(kind, ep.name, ep.value, dist_name, dist.version))
    return Registry(infos)

"""The component marker: a step setting that lists component plugins (a clean step's
``filters``) declares it with :func:`components`, and hashing, validation and recorded plugin
versions read that one declaration."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.config import JsonDict

from mtcore.contracts.errors import PluginError


def components(kind: str, reserved: tuple[str, ...] = (), label_key: str = "") -> JsonDict:
    """``Field(..., json_schema_extra=components("filters"))`` marks a setting that lists
    component plugins of ``kind`` (each a name, or a mapping with ``name`` and the plugin's
    settings), or holds one such entry (a rerank step's ``tuner``). This one declaration is what
    the step's hash (the plugin's settings less what its ``Config`` marks ``NOT_IDENTITY``),
    its validation (:meth:`mtcore.contracts.step.Step.check`) and its recorded plugin versions
    (:meth:`mtcore.contracts.step.Step.plugins_used`) read. ``reserved`` keys of an entry belong
    to the step or engine running it (a filter's ``keep``, a processor's ``langs``), not to the
    plugin; an entry's ``label_key`` value, when set, is its label (a rerank feature's name).
    :func:`mtcore.chain.components.field_specs` builds the chain's specs from the same mark.
    """
    return {"components": kind, "reserved": list(reserved), "label_key": label_key}


@dataclass(frozen=True)
class ComponentField:
    """One setting of a config marked :func:`components`, as set."""

    field: str
    kind: str
    reserved: tuple[str, ...]
    entries: tuple[Any, ...]
    listed: bool  # a list of entries (locations ``field.i``), else one entry (``field``)
    label_key: str = ""


def component_fields(config: BaseModel) -> list[ComponentField]:
    """The settings of ``config`` marked :func:`components`, in declaration order; one left
    unset (None) names no plugin."""
    found = []
    for name, field in type(config).model_fields.items():
        extra = field.json_schema_extra
        kind = extra.get("components") if isinstance(extra, dict) else None
        value = getattr(config, name)
        if not isinstance(kind, str) or value is None:
            continue
        listed = isinstance(value, list | tuple)
        entries = tuple(value) if listed else (value,)
        marked = extra.get("reserved") if isinstance(extra, dict) else None
        reserved = tuple(str(k) for k in marked) if isinstance(marked, list) else ()
        label_key = str(extra.get("label_key") or "") if isinstance(extra, dict) else ""
        found.append(ComponentField(name, kind, reserved, entries, listed, label_key))
    return found


def entry_name(entry: Any) -> str | None:
    """The plugin name of a component entry (a name, or a mapping with ``name``)."""
    if isinstance(entry, str):
        return entry
    name = entry.get("name") if isinstance(entry, dict) else None
    return None if name is None else str(name)


def entry_dict(entry: Any) -> Any:
    """A component entry as a mapping: a name becomes ``{"name": name}``, a mapping is copied;
    anything else is returned as is, for validation to reject."""
    if isinstance(entry, str):
        return {"name": entry}
    return dict(entry) if isinstance(entry, dict) else entry


def entry_settings(entry: Any, skip: Collection[str] = ()) -> dict[str, Any]:
    """The plugin's settings of a component entry: every key but ``name`` and ``skip`` (the
    keys that belong to the step, such as a filter's ``keep``)."""
    if not isinstance(entry, dict):
        return {}
    return {k: v for k, v in entry.items() if k != "name" and k not in skip}


def pydantic_problems(
    exc: ValidationError, prefix: str = "", strip_prefix: tuple[str, ...] = ()
) -> list[str]:
    """``steps.clean.filters.1.max_ratio: Input should be greater than 1``."""
    out = []
    for err in exc.errors():
        parts = [str(p) for p in err["loc"]]
        if parts and parts[0] in strip_prefix:
            parts = parts[1:]
        where = ".".join(p for p in ([prefix] if prefix else []) + parts)
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown setting"
        out.append(f"{where}: {message}" if where else message)
    return out


def check_components(
    registry: Any,
    kind: str,
    entries: Sequence[Any],
    field: str,
    reserved: tuple[str, ...] = (),
) -> list[tuple[str, str]]:
    """Problems of a step setting that lists component plugins, each entry a name or
    ``{name: ..., <settings>}``; locations are relative to the step (``filters.1.max_ratio``).
    ``reserved`` keys of an entry belong to the step (a filter's ``keep``, a processor's
    ``langs``) and are not the plugin's settings."""
    problems: list[tuple[str, str]] = []
    for i, entry in enumerate(entries):
        name = entry_name(entry)
        if name is None:
            problems.append((f"{field}.{i}.name", f"Field required (a {kind[:-1]} plugin name)"))
            continue
        try:
            cls = registry.load(kind, name)
        except PluginError as exc:
            problems.append((f"{field}.{i}.name", str(exc)))
            continue
        settings = entry_settings(entry, reserved)
        try:
            cls.Config.model_validate(settings)
        except ValidationError as exc:
            for problem in pydantic_problems(exc, f"{field}.{i}"):
                where, _, message = problem.partition(": ")
                problems.append((where, message))
    return problems


def check_component_fields(
    fields: Sequence[ComponentField], registry: Any
) -> list[tuple[str, str]]:
    """:func:`check_components` over each of ``fields``; one entry's problems are located at
    the field itself (``tuner.method``, not ``tuner.0.method``)."""
    problems = []
    for found in fields:
        for where, message in check_components(
            registry, found.kind, found.entries, found.field, found.reserved
        ):
            if not found.listed and where.startswith(f"{found.field}.0"):
                where = found.field + where[len(found.field) + 2 :]
            problems.append((where, message))
    return problems

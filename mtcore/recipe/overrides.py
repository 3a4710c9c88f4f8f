"""Profiles (deep-merged overlays that may extend one another), ``--set key.path=value``
overrides and ``${var}`` interpolation."""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from mtcore.contracts.errors import RecipeError
from mtcore.contracts.registry import suggest

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

MAX_VALUES = 1_000_000
"""Values a recipe may hold once its YAML aliases are expanded: the four recipes hold a few
thousand. Aliases share one object when loaded, but every later walk (profiles, interpolation,
validation, hashing) visits each use: nine nested levels of ten aliases in 384 bytes are a
billion values to walk."""


MAX_CHARS = 16 << 20
"""Characters a recipe (or a ``--set`` value) may have: the largest recipe has about 60,000."""


def safe_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load``, refusing a document whose aliases expand past :data:`MAX_VALUES`
    values or refer to themselves; counted on the loaded objects in linear time."""
    if len(text) > MAX_CHARS:
        raise RecipeError(
            [f"{len(text):,} characters: past the {MAX_CHARS:,} a recipe may have"], where
        )
    try:
        document = yaml.safe_load(text)
    except RecursionError:
        raise RecipeError(["YAML nested too deeply"], where) from None
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, dict | list):
            return 1
        key = id(node)
        if key in sizes:
            if sizes[key] < 0:
                raise RecipeError(["a YAML alias refers to itself (inside its anchor)"], where)
            return sizes[key]
        sizes[key] = -1
        children = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1
        for _, child in children:
            total += size(child)
            if total > MAX_VALUES:
                raise RecipeError(
                    [
                        f"YAML aliases expand to more than {MAX_VALUES:,} values; a recipe "
                        "holds thousands (anchors are for sharing a block, not multiplying it)"
                    ],
                    where,
                )
        sizes[key] = total
        return total

    try:
        size(document)
    except RecursionError:
        raise RecipeError(["YAML nested too deeply"], where) from None
    return document


def deep_merge(base: Any, override: Any) -> Any:
    """Mappings merge key by key; anything else replaces. ``None`` deletes the key (so a
    profile or ``--set`` can remove a step or a setting)."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """``steps.train.max_update=20`` -> (['steps', 'train', 'max_update'], 20); the value is read
    as YAML so numbers, booleans, lists and ``null`` work."""
    if "=" not in assignment:
        raise RecipeError([f"--set {assignment!r}: expected KEY.PATH=VALUE"], "command line")
    key, raw = assignment.split("=", 1)
    path = [part for part in key.strip().split(".") if part]
    if not path:
        raise RecipeError([f"--set {assignment!r}: empty key"], "command line")
    try:
        value = safe_yaml(raw, "command line") if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise RecipeError(
            [f"--set {assignment!r}: value is not valid YAML ({exc})"], "command line"
        ) from exc
    return path, value


def apply_set(document: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """Set one dotted path; list elements are addressed by index (``filters.1.max_ratio``)."""
    document = copy.deepcopy(document)
    node: Any = document
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            node = node[_index(node, part, path[: i + 1])]
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, dict | list):
                raise RecipeError(
                    [f"--set {'.'.join(path)}: {'.'.join(path[: i + 1])} is a value, not a map"],
                    "command line",
                )
    last = path[-1]
    if isinstance(node, list):
        node[_index(node, last, path)] = value
    elif value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return document


def _index(node: list[Any], part: str, path: list[str]) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise RecipeError(
            [f"--set {'.'.join(path)}: {part!r} is not an index of a list of {len(node)}"],
            "command line",
        )
    return int(part)


def interpolate(node: Any, variables: dict[str, Any], problems: list[str], loc: str = "") -> Any:
    """Replace ``${name}`` in every string by ``vars.name``; unknown names are problems."""
    if isinstance(node, dict):
        return {
            k: interpolate(v, variables, problems, f"{loc}.{k}" if loc else str(k))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [interpolate(v, variables, problems, f"{loc}.{i}") for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:
        whole = _VAR.fullmatch(node)
        if whole and whole.group(1) in variables:  # keep the variable's type
            return variables[whole.group(1)]

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in variables:
                problems.append(f"{loc}: unknown variable ${{{name}}}; define it under 'vars'")
                return match.group(0)
            return str(variables[name])

        return _VAR.sub(sub, node)
    return node


def resolve_document(
    document: dict[str, Any], profile: str | None, sets: list[str], source: str
) -> tuple[dict[str, Any], str | None]:
    """Apply the profile, then ``--set`` overrides, then ``${var}`` interpolation."""
    chosen = profile or document.get("default_profile")
    if chosen is not None:
        for layer in profile_chain(document, chosen, source):
            document = deep_merge(document, layer)
    for assignment in sets:
        path, value = parse_set(assignment)
        document = apply_set(document, path, value)
    problems: list[str] = []
    variables = document.get("vars") or {}
    if not isinstance(variables, dict):
        raise RecipeError(["vars: must be a mapping"], source)
    body = {k: v for k, v in document.items() if k not in ("profiles", "vars")}
    body = interpolate(body, variables, problems)
    if problems:
        raise RecipeError(problems, source)
    return {**document, **body}, chosen


EXTENDS = "extends"  # a profile's key naming the profile it overlays


def profile_chain(document: dict[str, Any], name: str, source: str) -> list[dict[str, Any]]:
    """The overlays that profile ``name`` stands for, base first: a profile with ``extends: B``
    is profile ``B`` with its own keys deep-merged on top (``smoke: {extends: cpu, ...}``
    shrinks the cpu profile without repeating it)."""
    profiles = document.get("profiles") or {}
    names = list(profiles) if isinstance(profiles, dict) else []
    chain: list[dict[str, Any]] = []
    seen: list[str] = []
    current: str | None = name
    while current is not None:
        if current in seen:
            cycle = " -> ".join([*seen, current])
            raise RecipeError([f"profiles: {EXTENDS} forms a cycle: {cycle}"], source)
        if current not in names:
            where = f"profile {seen[-1]!r} extends " if seen else ""
            raise RecipeError(
                [f"{where}unknown profile {current!r}. {suggest(current, names, 'Profiles')}"],
                source,
            )
        seen.append(current)
        layer = profiles[current] or {}
        if not isinstance(layer, dict):
            raise RecipeError([f"profiles.{current}: must be a mapping"], source)
        base = layer.get(EXTENDS)
        if base is not None and not isinstance(base, str):
            raise RecipeError([f"profiles.{current}.{EXTENDS}: must be a profile name"], source)
        chain.append({k: v for k, v in layer.items() if k != EXTENDS})
        current = base
    return chain[::-1]

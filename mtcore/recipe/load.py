"""Recipe loading and validation. A recipe is data (``yaml.safe_load``); every problem is
reported at once with its location before any work starts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mtcore.contracts.components import entry_dict, pydantic_problems
from mtcore.contracts.errors import PluginError, RecipeError
from mtcore.contracts.plugin import Plugin, PluginConfig
from mtcore.contracts.registry import Registry, suggest
from mtcore.contracts.resources import ResourceSpec
from mtcore.contracts.step import Step
from mtcore.recipe.graph import (
    check_cycles,
    check_kept_tokens,
    check_references,
    check_unbuilt_references,
    split_reference as split_reference,
)
from mtcore.recipe.overrides import resolve_document, safe_yaml
from mtcore.recipe.stages import check_stage_keys

STEP_KEYS = ("kind", "inputs", "bypass")  # bypass: stand-ins used by --ablate (ablation.py)
VARIADIC = "*"  # a step whose ``inputs`` has this role takes any role names, in recipe order
_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_DIRECTION = re.compile(r"^[a-z]{2,3}-[a-z]{2,3}$")


class ExecutorSpec(BaseModel):
    """``executor:`` of a recipe: the plugin ``name`` and its settings (``workers`` and any other
    key the plugin's ``Config`` takes, checked against it by :func:`build_recipe`). A bare
    string names the plugin (``--set executor=ray``). Executor settings say where steps run,
    never what they compute, so they are part of no step's hash."""

    model_config = ConfigDict(extra="allow")
    name: str = Field("local", description="executor plugin name")
    workers: int | None = Field(None, ge=1, le=1024, description="parallel workers; default: cores")

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return entry_dict(value)

    def settings(self) -> dict[str, Any]:
        """The plugin's settings: every key but ``name``, ``workers`` only when given."""
        values = dict(self.model_extra or {})
        if self.workers is not None:
            values["workers"] = self.workers
        return values


class SchedulerSpec(BaseModel):
    """``scheduler:`` of a recipe: where whole steps run (a ``schedulers`` plugin: local, ray,
    slurm) and its settings, checked against the plugin's ``Config``. A bare string names the
    plugin. Like the executor, part of no step's hash."""

    model_config = ConfigDict(extra="allow")
    name: str = Field("local", description="scheduler plugin name")

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return entry_dict(value)

    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RecipeHead(BaseModel):
    """The recipe's own keys; ``data``, ``models`` and ``steps`` entries are validated by their
    plugins."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$",
        description="names the default workdir, work/<name>: a plain name ('..' would be the "
        "current directory)",
    )
    description: str = ""
    paper: str | None = Field(None, description="citation of the system this recipe replicates")
    directions: list[str] = Field(default_factory=list)
    submitted: dict[str, str] = Field(
        default_factory=dict,
        description="per direction (en-ja): the stage the paper submitted; mtcore translate "
        "and export serve it by default (else the direction's last stage)",
    )
    stage_notes: dict[str, str] = Field(
        default_factory=dict, description="per stage: a note the stage listings show"
    )
    vars: dict[str, Any] = Field(default_factory=dict)
    executor: ExecutorSpec = Field(default_factory=lambda: ExecutorSpec())
    scheduler: SchedulerSpec = Field(default_factory=lambda: SchedulerSpec())
    resources: dict[str, ResourceSpec] = Field(
        default_factory=dict,
        description="per step id, step kind or 'default': cpus, gpus, memory_gb, time",
    )
    seed: int = Field(1, ge=0)
    default_profile: str | None = None
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    data: dict[str, dict[str, Any]] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="pretrained models by id (hf:ORG/NAME, a local directory), each fetched "
        "by a step of the kind that declares Step.fetches_model",
    )
    steps: dict[str, dict[str, Any]] = Field(default_factory=dict)


@dataclass
class StepSpec:
    """One node of the plan: a recipe step, a ``data`` entry (run as a step of the kind that
    declares ``Step.fetches``, the shipped ``fetch``) or a ``models`` entry (the kind that
    declares ``Step.fetches_model``, the shipped ``fetch_model``)."""

    id: str
    kind: str
    plugin: Step
    inputs: dict[str, str] = field(default_factory=dict)  # role -> reference "step[.output]"
    location: str = ""


@dataclass
class Recipe:
    path: Path | None
    name: str
    profile: str | None
    head: RecipeHead
    resolved: dict[str, Any]
    steps: dict[str, StepSpec]
    ablated: tuple[str, ...] = ()  # steps removed by --ablate


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecipeError([f"cannot read recipe: {exc.strerror}"], str(path)) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise RecipeError(
            [f"line {line}, byte {column}: not UTF-8 (byte 0x{data[exc.start]:02x}); a recipe "
             "is UTF-8 text"], str(path),
        ) from exc  # fmt: skip
    try:
        document = safe_yaml(text, str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise RecipeError(
            [f"{where}not valid YAML: {getattr(exc, 'problem', exc)}"], str(path)
        ) from exc
    if not isinstance(document, dict):
        raise RecipeError(["the recipe must be a YAML mapping"], str(path))
    return document


def load_recipe(
    path: str | Path,
    registry: Registry,
    profile: str | None = None,
    sets: list[str] | None = None,
    ablate: tuple[str, ...] = (),
) -> Recipe:
    path = Path(path)
    return build_recipe(read_yaml(path), registry, profile, sets or [], str(path), path, ablate)


def build_recipe(
    document: dict[str, Any],
    registry: Registry,
    profile: str | None = None,
    sets: list[str] | None = None,
    source: str = "recipe",
    path: Path | None = None,
    ablate: tuple[str, ...] = (),
) -> Recipe:
    resolved, chosen = resolve_document(document, profile, sets or [], source)
    if ablate:
        from mtcore.recipe.ablation import ablate_document

        resolved = ablate_document(resolved, ablate, registry)
    problems: list[str] = []
    try:
        head = RecipeHead.model_validate(resolved)
    except ValidationError as exc:
        raise RecipeError(pydantic_problems(exc), source) from exc
    for i, direction in enumerate(head.directions):
        if not _DIRECTION.match(direction):
            problems.append(f"directions.{i}: {direction!r} is not a direction like 'en-ja'")
    _check_executor(head.executor, registry, problems)
    _check_scheduler(head.scheduler, registry, problems)
    steps: dict[str, StepSpec] = {}
    for name, entry in head.data.items():
        spec = _data_step(name, entry, registry, problems)
        if spec:
            steps[name] = spec
    for name, entry in head.models.items():
        if name in head.data:
            problems.append(f"models.{name}: name is also the name of a data entry; rename one")
            continue
        spec = _model_step(name, entry, registry, problems)
        if spec:
            steps[name] = spec
    for step_id, entry in head.steps.items():
        if step_id in head.data or step_id in head.models:
            section = "data" if step_id in head.data else "models"
            problems.append(
                f"steps.{step_id}: id is also the name of a {section} entry; rename one"
            )
            continue
        spec = _recipe_step(step_id, entry, registry, problems)
        if spec:
            steps[step_id] = spec
    named = set(head.data) | set(head.models) | set(head.steps)
    check_references(steps, problems, named)
    check_unbuilt_references(head.steps, steps, problems, named)
    _check_resources(head.resources, steps, problems)
    check_stage_keys(head.submitted, head.stage_notes, steps, problems)
    if not problems:
        check_cycles(steps, problems)
    if not problems:
        check_kept_tokens(steps, registry, problems)
    if problems:
        raise RecipeError(problems, source)
    return Recipe(path, head.name, chosen, head, resolved, steps, tuple(ablate))


def _check_executor(spec: ExecutorSpec, registry: Registry, problems: list[str]) -> None:
    """The executor plugin exists, takes these settings and can be built here (an executor
    starts its workers on first use, so building one is cheap; a missing optional dependency
    is reported now, before any step runs)."""
    cls = _load(registry, "executors", spec.name, "executor.name", problems)
    if cls is None or _validate_config(cls, spec.settings(), "executor", problems):
        return
    try:
        cls.from_dict(spec.settings())
    except PluginError as exc:
        problems.append(f"executor.name: {exc}")


def _check_scheduler(spec: SchedulerSpec, registry: Registry, problems: list[str]) -> None:
    cls = _load(registry, "schedulers", spec.name, "scheduler.name", problems)
    if cls is not None:
        _validate_config(cls, spec.settings(), "scheduler", problems)


def _check_resources(
    table: dict[str, ResourceSpec], steps: dict[str, StepSpec], problems: list[str]
) -> None:
    """``resources:`` keys name a step of the recipe, a step kind it uses, or ``default``."""
    kinds = {spec.kind for spec in steps.values()}
    valid = {"default", *kinds, *steps}
    for key in table:
        if key not in valid:
            problems.append(
                f"resources.{key}: not a step id, a step kind of this recipe or 'default'. "
                f"{suggest(key, valid, 'Valid keys')}"
            )


def _data_step(
    name: str, entry: dict[str, Any], registry: Registry, problems: list[str]
) -> StepSpec | None:
    loc = f"data.{name}"
    if not _ID.match(name):
        problems.append(f"{loc}: name must be lower_snake_case")
    if isinstance(entry, dict) and "source" not in entry:
        entry = _short_source(entry, registry)
    if not isinstance(entry, dict) or "source" not in entry:
        problems.append(f"{loc}.source: Field required (a source plugin name)")
        return None
    source_name = entry["source"]
    source_cls = _load(registry, "sources", str(source_name), f"{loc}.source", problems)
    if source_cls is None:
        return None
    try:
        fetch_cls = registry.declaring("steps", "fetches")
    except PluginError as exc:
        problems.append(f"{loc}: {exc}")
        return None
    own = set(fetch_cls.Config.model_fields) - {"config"}  # the fetching step's own settings
    source_cfg = {k: v for k, v in entry.items() if k not in own}
    source_problems = _validate_config(source_cls, source_cfg, loc, problems)
    if source_problems:
        return None
    fetch_values = {k: v for k, v in entry.items() if k in own} | {"config": source_cfg}
    plugin = _make(fetch_cls, fetch_values, loc, problems, strip_prefix=("config",))
    if not isinstance(plugin, Step):
        return None
    return StepSpec(name, fetch_cls.name, plugin, {}, loc)


def _model_step(
    name: str, entry: dict[str, Any], registry: Registry, problems: list[str]
) -> StepSpec | None:
    """A ``models`` entry as a step of the kind that declares ``Step.fetches_model``; the
    entry is that step's settings (``{hf: ORG/NAME}`` is ``{id: hf:ORG/NAME}``)."""
    loc = f"models.{name}"
    if not _ID.match(name):
        problems.append(f"{loc}: name must be lower_snake_case")
    if not isinstance(entry, dict):
        problems.append(f"{loc}: must be a mapping such as {{id: hf:ORG/NAME, revision: COMMIT}}")
        return None
    if "hf" in entry and "id" not in entry:
        entry = {"id": f"hf:{entry['hf']}", **{k: v for k, v in entry.items() if k != "hf"}}
    try:
        fetch_cls = registry.declaring("steps", "fetches_model")
    except PluginError as exc:
        problems.append(f"{loc}: {exc}")
        return None
    plugin = _make(fetch_cls, entry, loc, problems)
    if not isinstance(plugin, Step):
        return None
    return StepSpec(name, fetch_cls.name, plugin, {}, loc)


def _short_source(entry: dict[str, Any], registry: Registry) -> dict[str, Any]:
    """A data entry without ``source:`` whose one key names a source: ``{mtdata: ID}`` is
    ``{source: mtdata, id: ID}``, ``{sacrebleu: {test_set: wmt22, ...}}`` is ``{source:
    sacrebleu, test_set: wmt22, ...}``; the entry's other keys stay (``max_pairs``, ...)."""
    named = [key for key in entry if key in registry.names("sources")]
    if len(named) != 1:
        return entry
    key = named[0]
    value = entry[key]
    rest = {k: v for k, v in entry.items() if k != key}
    settings = dict(value) if isinstance(value, dict) else {"id": value}
    return {"source": key, **settings, **rest}


def _recipe_step(
    step_id: str, entry: dict[str, Any], registry: Registry, problems: list[str]
) -> StepSpec | None:
    loc = f"steps.{step_id}"
    if not _ID.match(step_id):
        problems.append(f"{loc}: step id must be lower_snake_case")
    if not isinstance(entry, dict):
        problems.append(f"{loc}: must be a mapping with 'kind', 'inputs' and the step's settings")
        return None
    if "kind" not in entry:
        problems.append(f"{loc}.kind: Field required (a step plugin name)")
        return None
    kind = str(entry["kind"])
    step_cls = _load(registry, "steps", kind, f"{loc}.kind", problems)
    if step_cls is None:
        return None
    inputs = entry.get("inputs") or {}
    if not isinstance(inputs, dict):
        problems.append(f"{loc}.inputs: must map input roles to data names or step ids")
        inputs = {}
    variadic = VARIADIC in step_cls.inputs
    if variadic and step_cls.inputs[VARIADIC] and not inputs:
        problems.append(f"{loc}.inputs: step kind {kind!r} needs at least one input")
    for role, required in step_cls.inputs.items():
        if role != VARIADIC and required and role not in inputs:
            problems.append(f"{loc}.inputs.{role}: Field required (step kind {kind!r} needs it)")
    for role in inputs:
        if role not in step_cls.inputs and not variadic:
            valid = ", ".join(step_cls.inputs) or "none"
            problems.append(
                f"{loc}.inputs.{role}: step kind {kind!r} has no input {role!r} (valid: {valid})"
            )
    bypass = entry.get("bypass") or {}
    if not isinstance(bypass, dict):
        problems.append(f"{loc}.bypass: must map outputs to stand-ins (input roles or steps)")
    else:
        for output in bypass:
            if output not in step_cls.outputs:
                valid = ", ".join(step_cls.outputs) or "none"
                problems.append(
                    f"{loc}.bypass.{output}: step kind {kind!r} has no output {output!r} "
                    f"(valid: {valid})"
                )
    config = {k: v for k, v in entry.items() if k not in STEP_KEYS}
    plugin = _make(step_cls, config, loc, problems)
    if plugin is None:
        return None
    assert isinstance(plugin, Step)
    accepted = plugin.accepted_inputs()
    for role in inputs:
        if accepted is not None and role not in accepted:
            problems.append(
                f"{loc}.inputs.{role}: step kind {kind!r} has no input {role!r} with these "
                f"settings (valid: {', '.join(sorted(accepted))})"
            )
    own = plugin.check(registry)
    for where, message in own:
        problems.append(f"{loc}.{where}: {message}" if where else f"{loc}: {message}")
    if not own:  # a step's own check locates its problems better than this generic one
        for used_kind, used_name in plugin.plugins_used():
            if not registry.has(used_kind, used_name):
                problems.append(
                    f"{loc}: uses unknown {used_kind} plugin {used_name!r}. "
                    f"{suggest(used_name, registry.names(used_kind), f'Known {used_kind}')}"
                )
    return StepSpec(step_id, kind, plugin, {str(k): str(v) for k, v in inputs.items()}, loc)


def _load(
    registry: Registry, kind: str, name: str, loc: str, problems: list[str]
) -> type[Any] | None:
    try:
        return registry.load(kind, name)
    except PluginError as exc:
        problems.append(f"{loc}: {exc}")
        return None


def _validate_config(cls: type, values: dict[str, Any], loc: str, problems: list[str]) -> list[str]:
    config_cls: type[PluginConfig] = cls.Config  # type: ignore[attr-defined]
    try:
        config_cls.model_validate(values)
    except ValidationError as exc:
        found = pydantic_problems(exc, loc)
        problems.extend(found)
        return found
    return []


def _make(
    cls: type,
    values: dict[str, Any],
    loc: str,
    problems: list[str],
    strip_prefix: tuple[str, ...] = (),
) -> Plugin | None:
    try:
        return cls.from_dict(values)  # type: ignore[attr-defined, no-any-return]
    except ValidationError as exc:
        problems.extend(pydantic_problems(exc, loc, strip_prefix))
        return None

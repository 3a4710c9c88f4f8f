"""The plan: the recipe's steps in dependency order, each with its identity hash.

A step's hash covers its kind, resolved config, the versions of the plugins it uses, its
fingerprint (outside data it reads) and the hashes of the steps it reads from. Two recipes
that share a workdir and a step of equal hash share its output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtcore.contracts.registry import Registry
from mtcore.recipe.hashing import hash_json
from mtcore.recipe.load import Recipe, StepSpec, split_reference
from mtcore.recipe.paths import finished_dir, step_dirname

HASH_LEN = 12
FORMAT_VERSION = 1  # bump when the on-disk layout of step outputs changes


@dataclass
class PlannedStep:
    spec: StepSpec
    hash: str
    deps: list[str]
    identity: dict[str, Any] = field(default_factory=dict)
    """What ``hash`` hashes; its ``inputs`` rows are ``[role, plan hash, output]``."""

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def dirname(self) -> str:
        return step_dirname(self.spec.id, self.hash)


def topological_order(steps: dict[str, StepSpec]) -> list[str]:
    """Dependencies first; ties keep recipe order (data entries, then steps as written)."""
    order: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        done.add(node)
        for ref in steps[node].inputs.values():
            visit(split_reference(ref)[0])
        order.append(node)

    for node in steps:
        visit(node)
    return order


def make_plan(recipe: Recipe, registry: Registry, until: str | None = None) -> list[PlannedStep]:
    steps = recipe.steps
    order = topological_order(steps)
    if until is not None:
        order = [s for s in order if s in _ancestors(steps, until)]
    hashes: dict[str, str] = {}
    plan: list[PlannedStep] = []
    for step_id in order:
        spec = steps[step_id]
        plugin = spec.plugin
        versions = {f"steps:{spec.kind}": registry.version("steps", spec.kind)}
        for kind, name in plugin.plugins_used():
            versions[f"{kind}:{name}"] = registry.version(kind, name)
        inputs = []  # in recipe order: it matters to steps that take any roles (concat)
        for role, ref in spec.inputs.items():
            target, output = split_reference(ref)
            inputs.append([role, hashes[target], output or steps[target].plugin.outputs[0]])
        identity = {
            "format": FORMAT_VERSION,
            "kind": spec.kind,
            "config": plugin.identity(registry),
            "versions": versions,
            "fingerprint": plugin.fingerprint(registry),
            "inputs": inputs,
        }
        hashes[step_id] = hash_json(identity)[:HASH_LEN]
        deps = sorted({split_reference(ref)[0] for ref in spec.inputs.values()})
        plan.append(PlannedStep(spec, hashes[step_id], deps, identity))
    return plan


def _ancestors(steps: dict[str, StepSpec], target: str) -> set[str]:
    from mtcore.contracts.errors import RecipeError
    from mtcore.contracts.registry import suggest

    if target not in steps:
        raise RecipeError(
            [f"--until: unknown step {target!r}. {suggest(target, steps, 'Steps')}"], "command line"
        )
    seen: set[str] = set()
    stack = [target]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(split_reference(ref)[0] for ref in steps[node].inputs.values())
    return seen


def step_dir(workdir: Path, planned: PlannedStep) -> Path:
    return finished_dir(workdir, planned.dirname)

"""Removing steps from a recipe (``mtcore run R.yaml --ablate STEP``): the ablation of a step is
the recipe with that step gone and every reader of its outputs rewired to a stand-in.

A reader of output ``o`` of the removed step ``S`` gets, in this order:

1. ``steps.S.bypass.o`` when the recipe declares it: one of ``S``'s input roles (``init``:
   a fine-tuning step stands in for itself with the model it started from) or any step
   reference (``translate_test.hyp``: the decoder's 1-best stands in for the reranked one);
2. ``S``'s input of the same role as the output (a ``clean`` step's ``corpus`` output is
   replaced by its ``corpus`` input: the data as it was before cleaning);
3. nothing, when the reader's input is optional (an ensemble member ``model2``, a filter's
   extra resource): the input is dropped.

Anything else is an error naming the reader, the output and the ``bypass`` to declare. The
removal works on the recipe document after its profile and ``--set`` overrides, so the
ablated recipe validates, plans and caches like any other: the steps upstream of ``S`` keep
their hashes and are shared with the full recipe's run in the same workdir.
"""

from __future__ import annotations

import copy
from typing import Any

from mtcore.contracts.errors import RecipeError
from mtcore.contracts.registry import Registry, suggest

BYPASS = "bypass"
VARIADIC = "*"


def parse_ablations(values: tuple[str, ...] | list[str]) -> list[tuple[str, ...]]:
    """``--ablate A --ablate B,C`` -> [("A",), ("B", "C")]: one variant per option, each
    removing the comma-separated steps together."""
    variants = []
    for value in values:
        steps = tuple(s.strip() for s in value.split(",") if s.strip())
        if not steps:
            raise RecipeError([f"--ablate {value!r}: name one or more steps"], "command line")
        variants.append(steps)
    return variants


def ablate_document(
    document: dict[str, Any], removed: tuple[str, ...], registry: Registry
) -> dict[str, Any]:
    """A copy of the resolved recipe ``document`` without the ``removed`` steps."""
    out = copy.deepcopy(document)
    steps: dict[str, Any] = out.get("steps") or {}
    for step_id in removed:
        if step_id not in steps:
            data = out.get("data") or {}
            why = (
                f"{step_id!r} is a data entry, not a step"
                if step_id in data
                else f"unknown step {step_id!r}. {suggest(step_id, steps, 'Steps')}"
            )
            raise RecipeError([f"--ablate: {why}"], "command line")
        _remove(steps, data_names=set(out.get("data") or {}), step_id=step_id, registry=registry)
    out["steps"] = steps
    return out


def _outputs(entry: Any, registry: Registry) -> tuple[tuple[str, ...], dict[str, bool]]:
    cls = registry.load("steps", str(entry["kind"]))
    return tuple(cls.outputs), dict(cls.inputs)


def _remove(steps: dict[str, Any], data_names: set[str], step_id: str, registry: Registry) -> None:
    entry = steps.pop(step_id)
    outputs, own_roles = _outputs(entry, registry)
    inputs: dict[str, str] = {str(k): str(v) for k, v in (entry.get("inputs") or {}).items()}
    bypass = entry.get(BYPASS) or {}
    if not isinstance(bypass, dict):
        raise RecipeError([f"steps.{step_id}.bypass: must map outputs to stand-ins"], "recipe")

    def stand_in(output: str) -> str | None:
        if output in bypass:
            value = str(bypass[output])
            if value in own_roles:  # an input role: its reference, unless it is not connected
                return inputs.get(value)
            return value
        return inputs.get(output)

    problems = []
    for reader_id, reader in steps.items():
        reads = reader.get("inputs") or {}
        if not isinstance(reads, dict):
            continue
        _, roles = _outputs(reader, registry)
        for role, ref in list(reads.items()):
            target, _, output = str(ref).partition(".")
            if target != step_id:
                continue
            output = output or outputs[0]
            replacement = stand_in(output)
            if replacement is not None:
                reads[role] = replacement
            elif not roles.get(role, roles.get(VARIADIC, True)):
                del reads[role]
            else:
                problems.append(
                    f"--ablate {step_id}: steps.{reader_id}.inputs.{role} reads "
                    f"{step_id}.{output}, which has no stand-in; declare "
                    f"steps.{step_id}.bypass: {{{output}: <an input role of {step_id} or a "
                    "step reference>}"
                )
    if problems:
        raise RecipeError(problems, "command line")
    known = set(steps) | data_names
    for reader_id, reader in steps.items():
        for role, ref in (reader.get("inputs") or {}).items():
            if str(ref).partition(".")[0] not in known:
                raise RecipeError(
                    [f"--ablate {step_id}: steps.{reader_id}.inputs.{role} now reads {ref!r}, "
                     "which is not a step or data entry (check the bypass)"],
                    "command line",
                )  # fmt: skip

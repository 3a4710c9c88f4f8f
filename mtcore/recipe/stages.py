"""A recipe's stages as the recipe names them: which steps score one (``Step.stage`` with
``hyp`` and ``ref`` inputs), the stage the paper submitted in each direction (``submitted:``,
the default of ``mtcore translate`` and ``mtcore export``) and the notes on stages
(``stage_notes:``), checked against the graph when the recipe loads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from mtcore.contracts.registry import suggest
from mtcore.contracts.step import Step


class Staged(Protocol):
    """What this module reads of a plan node (``mtcore.recipe.load.StepSpec``)."""

    plugin: Step
    inputs: dict[str, str]


def compact(direction: str) -> str:
    """``en-ja`` (a recipe's spelling) as a stage's direction, ``enja``."""
    return direction.replace("-", "").replace("_", "")


def declared_stages(steps: Mapping[str, Staged]) -> dict[str, list[str]]:
    """Direction (``enja``) -> its stage names, in recipe order."""
    found: dict[str, list[str]] = {}
    for step_id, spec in steps.items():
        staged = spec.plugin.stage(step_id)
        if staged is None or "hyp" not in spec.inputs or "ref" not in spec.inputs:
            continue
        found.setdefault(staged[1], []).append(staged[0])
    return found


def check_stage_keys(
    submitted: Mapping[str, str],
    notes: Mapping[str, str],
    steps: Mapping[str, Staged],
    problems: list[str],
) -> None:
    """``submitted.<direction>`` names a stage of that direction; ``stage_notes`` keys name a
    stage of some direction."""
    found = declared_stages(steps)
    for key, stage in submitted.items():
        named = found.get(compact(key))
        if named is None:
            valid = ", ".join(found) or "none"
            problems.append(
                f"submitted.{key}: no stage scores direction {key!r}; directions with stages: "
                f"{valid}"
            )
        elif stage not in named:
            problems.append(
                f"submitted.{key}: {stage!r} is not a stage of {compact(key)}; valid (in "
                f"order): {', '.join(named)}"
            )
    every = list(dict.fromkeys(s for named in found.values() for s in named))
    for stage in notes:
        if stage not in every:
            problems.append(f"stage_notes.{stage}: not a stage. {suggest(stage, every, 'Stages')}")


def stage_mark(
    submitted: Mapping[str, str],
    notes: Mapping[str, str],
    steps: Mapping[str, Staged],
    stage: str,
    direction: str | None = None,
) -> str:
    """How listings mark a stage: ``submitted`` (``submitted: enja`` when only some of its
    directions submitted it and ``direction`` is None), its note, both or ''."""
    chosen = {compact(key): named for key, named in submitted.items()}
    if direction is not None:
        marks = ["submitted"] if chosen.get(direction) == stage else []
    else:
        have = [d for d, named in declared_stages(steps).items() if stage in named]
        chose = [d for d in have if chosen.get(d) == stage]
        only = "" if chose == have else ": " + ", ".join(chose)
        marks = ["submitted" + only] if chose else []
    note = notes.get(stage)
    return "; ".join([*marks, *([note] if note else [])])

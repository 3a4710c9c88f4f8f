"""``plan.json``: every step of a run's plan as the run page and ``mtcore report`` read it (its
kind, folder, inputs, stage and the resources it holds), written by the runner when a run
starts, so that steps not yet run are shown too."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mtcore.exec.files import replace_file
from mtcore.recipe.graph import split_reference
from mtcore.recipe.load import Recipe
from mtcore.recipe.plan import PlannedStep

PLAN_FILE = "plan.json"


def plan_file(workdir: Path, label: str | None = None) -> Path:
    return workdir / (PLAN_FILE if label is None else f"plan.{label}.json")


def write_plan(
    workdir: Path,
    recipe: Recipe,
    plan: list[PlannedStep],
    needs: dict[str, str],
    label: str | None = None,
) -> Path:
    """The plan as the page reads it; ``needs``: each step's resources, described."""
    steps = []
    for planned in plan:
        stage = planned.spec.plugin.stage(planned.id)
        steps.append(
            {
                "id": planned.id,
                "kind": planned.spec.kind,
                "dir": planned.dirname,
                "inputs": {
                    role: split_reference(ref)[0] for role, ref in planned.spec.inputs.items()
                },
                "stage": None if stage is None else list(stage),
                "holds": needs.get(planned.id, ""),
            }
        )
    document = {
        "recipe": recipe.name,
        "profile": recipe.profile,
        "paper": recipe.head.paper,
        "label": label,
        "ablated": list(recipe.ablated),
        "started": time.time(),
        "steps": steps,
    }
    path = plan_file(workdir, label)
    replace_file(path, json.dumps(document, indent=1, ensure_ascii=False))
    return path

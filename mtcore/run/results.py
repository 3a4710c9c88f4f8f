"""What a run returns: each step's status, manifest and output directory, in plan order. The
runner builds it, the driver fills it as steps end, and the report, the CLI and hooks read it;
none of them imports the others for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtcore.recipe.plan import PlannedStep


@dataclass
class StepResult:
    planned: PlannedStep
    status: str  # "ran" or "cached" (also when reused by content: mtcore.run.cache)
    manifest: dict[str, Any]
    path: Path


@dataclass
class RunResult:
    workdir: Path
    results: list[StepResult] = field(default_factory=list)
    log_file: Path | None = None

    def manifest(self, step_id: str) -> dict[str, Any]:
        for result in self.results:
            if result.planned.id == step_id:
                return result.manifest
        raise KeyError(step_id)

    def path(self, step_id: str) -> Path:
        for result in self.results:
            if result.planned.id == step_id:
                return result.path
        raise KeyError(step_id)

"""The one exception hierarchy. Only the CLI turns these into ``Error: ...`` and an exit code."""

from __future__ import annotations


class MtcoreError(Exception):
    """Root of every error mtcore raises on purpose."""


class RecipeError(MtcoreError):
    """A recipe is invalid. Carries every problem found, each with its location."""

    def __init__(self, problems: list[str], source: str = "recipe") -> None:
        self.problems = problems
        self.source = source
        listing = "\n".join(f"  {p}" for p in problems)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"{source}: {len(problems)} {noun}\n{listing}")


class PluginError(MtcoreError):
    """A plugin is unknown, claimed twice, or failed to load."""


class DataError(MtcoreError):
    """Input data is malformed: names the file, the line and what would be valid."""


class StepError(MtcoreError):
    """A step failed while running."""

"""The ``augment`` step's collapse check: an augmenter whose output is mostly a bare tag, that
changed (almost) nothing, or whose lines are mostly a single unit (noise that can only blank
them: whitespace words of unsegmented Chinese) fails the step with its counts, instead of
writing training data that teaches nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import Field

from mtcore.api import NOT_IDENTITY, PluginConfig, StepError


class CollapseLimits(PluginConfig):
    max_bare_share: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        json_schema_extra=NOT_IDENTITY,
        description="most of an augmenter's non-empty lines that may come out as nothing but "
        "its tokens (a bare <blank>)",
    )
    min_changed_share: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        json_schema_extra=NOT_IDENTITY,
        description="fewest of an augmenter's non-empty lines it must change",
    )
    max_single_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        json_schema_extra=NOT_IDENTITY,
        description="most of a noise augmenter's non-empty lines that may be one unit (a "
        "Chinese line as one whitespace word)",
    )


def bare_lines(old: Sequence[str], new: Sequence[str], emitted: frozenset[str]) -> int:
    """Lines that had text and now hold only ``emitted`` tokens and spaces."""
    if not emitted:
        return 0
    count = 0
    for before, after in zip(old, new, strict=True):
        if before.strip() and after.strip():
            rest = after
            for token in emitted:
                rest = rest.replace(token, "")
            count += not rest.strip()
    return count


def check_collapse(
    step_id: str, labels: Sequence[str], counts: Counter[str], limits: CollapseLimits
) -> None:
    """Raises a StepError naming ``step_id``, the augmenter and its counts when one of them
    crosses ``limits``."""
    problems = []
    for label in labels:
        seen = counts[f"seen.{label}"]
        if not seen:
            continue
        mine = {key: value for key, value in counts.items() if key.endswith(f".{label}")}
        mine |= {key: value for key, value in counts.items() if key.startswith(f"{label}.")}
        shown = ", ".join(f"{key} {value}" for key, value in sorted(mine.items()))
        single = counts[f"{label}.single"] / max(1, counts[f"{label}.lines"])
        if counts[f"bare.{label}"] / seen > limits.max_bare_share:
            why = f"{counts[f'bare.{label}']} of {seen} lines are only its tokens"
        elif counts[f"changed.{label}"] / seen < limits.min_changed_share:
            why = f"it changed {counts[f'changed.{label}']} of {seen} lines"
        elif counts[f"{label}.lines"] and single > limits.max_single_share:
            why = (
                f"{counts[f'{label}.single']} of {counts[f'{label}.lines']} lines are one unit "
                "(set a unit that fits the script: token or char)"
            )
        else:
            continue
        problems.append(f"augmenter {label!r} collapsed: {why} ({shown})")
    if problems:
        raise StepError(
            f"{step_id}: " + "; ".join(problems) + ". Limits: max_bare_share "
            f"{limits.max_bare_share}, min_changed_share {limits.min_changed_share}, "
            f"max_single_share {limits.max_single_share}"
        )

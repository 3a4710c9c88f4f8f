"""Checks of a recipe's graph: references to data entries, steps and their outputs (also of
steps that could not be built), dependency cycles, and tokens written into text that a
vocabulary downstream would cut into pieces. Each problem is a line naming where it
is and what would be valid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mtcore.contracts.registry import suggest
from mtcore.contracts.step import Step


class StepSpec(Protocol):
    """What these checks read of a recipe's step (:class:`mtcore.recipe.load.StepSpec`; a protocol,
    so that the recipe module imports this one and not the other way round)."""

    @property
    def inputs(self) -> dict[str, str]: ...

    @property
    def location(self) -> str: ...

    @property
    def plugin(self) -> Step: ...


def split_reference(ref: str) -> tuple[str, str | None]:
    step, _, output = ref.partition(".")
    return step, output or None


def check_references(
    steps: Mapping[str, StepSpec], problems: list[str], declared: set[str]
) -> None:
    """``declared`` holds every id in the recipe, valid or not: a reference to an entry that
    already has a problem of its own is not reported a second time."""
    for spec in steps.values():
        for role, ref in spec.inputs.items():
            target, output = split_reference(ref)
            if target in declared and target not in steps:
                continue
            if target not in steps:
                problems.append(
                    f"{spec.location}.inputs.{role}: unknown data or step {target!r}. "
                    f"{suggest(target, steps, 'Known')}"
                )
                continue
            outputs = steps[target].plugin.outputs
            if output is not None and output not in outputs:
                problems.append(
                    f"{spec.location}.inputs.{role}: step {target!r} has no output {output!r} "
                    f"(outputs: {', '.join(outputs)})"
                )
                continue
            written = steps[target].plugin.written_outputs()
            if (output or outputs[0]) not in written:
                problems.append(
                    f"{spec.location}.inputs.{role}: step {target!r} does not write output "
                    f"{output!r} with its settings (it writes: {', '.join(written)})"
                )


def check_unbuilt_references(
    entries: dict[str, Any], steps: Mapping[str, StepSpec], problems: list[str], declared: set[str]
) -> None:
    """A step that could not be built (a misspelt kind, a bad setting) still has its inputs
    checked: its dangling references are reported in the same pass, not after the fix."""
    for step_id, entry in entries.items():
        inputs = entry.get("inputs") if isinstance(entry, dict) else None
        if step_id in steps or not isinstance(inputs, dict):
            continue
        for role, ref in inputs.items():
            target = split_reference(str(ref))[0] if ref is not None else None
            if target is not None and target not in declared:
                problems.append(
                    f"steps.{step_id}.inputs.{role}: unknown data or step {target!r}. "
                    f"{suggest(target, declared, 'Known')}"
                )


def check_cycles(steps: Mapping[str, StepSpec], problems: list[str]) -> None:
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            cycle = trail[trail.index(node) :] + [node]
            problems.append(f"steps: dependency cycle {' -> '.join(cycle)}")
            return
        state[node] = 1
        for ref in steps[node].inputs.values():
            visit(split_reference(ref)[0], [*trail, node])
        state[node] = 2

    for node in steps:
        visit(node, [])


def check_kept_tokens(steps: Mapping[str, StepSpec], registry: Any, problems: list[str]) -> None:
    """For each step that makes a vocabulary (:meth:`Step.kept_tokens`) and each step that
    uses it, the tokens written (:meth:`Step.emitted_tokens`) by the steps that text reaches
    the user from must be kept whole by the vocabulary. The walk back from the user stops at
    trainings (a model's data is checked where it is encoded) and at vocabularies."""
    emitted = {step_id: spec.plugin.emitted_tokens(registry) for step_id, spec in steps.items()}
    for vocab_id, vocab in steps.items():
        kept = vocab.plugin.kept_tokens()
        if kept is None:
            continue
        missing: dict[str, tuple[str, str]] = {}
        for user_id, user in steps.items():
            if vocab_id not in {split_reference(ref)[0] for ref in user.inputs.values()}:
                continue
            for writer in _text_sources(steps, user_id):
                for token in sorted(emitted[writer] - kept):
                    missing.setdefault(token, (writer, user_id))
        for token, (writer, user_id) in missing.items():
            problems.append(
                f"{vocab.location}: the vocabulary does not keep {token!r} whole, which step "
                f"{writer!r} writes into text that step {user_id!r} encodes with it (add it to "
                "the tokens the vocabulary keeps: user_defined_symbols)"
            )


def _text_sources(steps: Mapping[str, StepSpec], user_id: str) -> list[str]:
    """The steps upstream of ``user_id`` whose text reaches it without passing a training or
    a vocabulary, in a stable order."""
    seen: list[str] = []
    stack = [split_reference(ref)[0] for ref in steps[user_id].inputs.values()]
    while stack:
        node = stack.pop()
        if node in seen or node not in steps:
            continue
        plugin = steps[node].plugin
        if plugin.trains or plugin.kept_tokens() is not None:
            continue
        seen.append(node)
        stack.extend(split_reference(ref)[0] for ref in steps[node].inputs.values())
    return seen

"""Translating new text with a finished run: ``mtcore translate`` and its Python API.

A stage of a recipe is a step that says it scores one (:meth:`mtcore.contracts.step.Step.stage`,
which the
report's stage table reads too; the shipped evaluate step does for ids
``eval_<stage>_<direction>``) with a ``hyp`` and a ``ref`` input. Its inference path is derived
from the graph, not listed per recipe: starting at the evaluated output, each step is followed
back through its line-aligned inputs (``Step.streams``: the corpus a step translates,
normalizes, truecases or reranks) until the test set the stage is scored against. The steps on
that path are replayed, with their own configs and hashes, on a corpus made of the new lines;
every other input they read (models, vocabularies, truecasers, dev n-best lists and
references) is the run's finished artifact. A user's own recipe gets ``translate`` as long as
its step kinds declare their streams.

The new lines fill every column of the replacement test corpus (the reference column is never
read on the way to the output), so translating a run's own test source reproduces the run's
own output byte for byte. Lines are read through the input policy with repairs only: a line
that the policy would drop is an error, so output line ``i`` is always input line ``i``.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtcore.contracts.errors import DataError, MtcoreError, StepError
from mtcore.contracts.registry import Registry
from mtcore.contracts.stats import Stats
from mtcore.contracts.step import Artifact, StepContext, config_dict
from mtcore.data.corpus import Corpus, CorpusWriter, InputPolicy, LineReader
from mtcore.exec.shards import keep_worker_memos
from mtcore.recipe.load import Recipe, split_reference
from mtcore.recipe.paths import step_dirname
from mtcore.recipe.plan import PlannedStep, make_plan, step_dir, topological_order
from mtcore.recipe.stages import compact
from mtcore.run.runner import is_complete, run_plugin

STRICT_KEEP = InputPolicy()
"""Bad lines stop with file and line; CR LF and line-break characters inside a line are
repaired (counted); empty lines are kept (and translate to empty lines)."""
REPAIR = InputPolicy(invalid_utf8="replace", nul="strip")
"""``--repair``: also invalid UTF-8 (replaced by U+FFFD) and NUL bytes (removed)."""


@dataclass(frozen=True)
class Stage:
    """A stage's evaluate step, its evaluated output and the test set it is scored on."""

    name: str
    direction: str
    evaluate: str
    hyp: tuple[str, str]  # (step, output)
    test: tuple[str, str]


def _resolve(recipe: Recipe, ref: str) -> tuple[str, str]:
    step, output = split_reference(ref)
    return step, output or recipe.steps[step].plugin.outputs[0]


def stages(recipe: Recipe) -> list[Stage]:
    """Every stage of the recipe, in recipe order."""
    found = []
    for step_id, spec in recipe.steps.items():
        staged = spec.plugin.stage(step_id)
        if staged is None or "hyp" not in spec.inputs or "ref" not in spec.inputs:
            continue
        hyp, test = _resolve(recipe, spec.inputs["hyp"]), _resolve(recipe, spec.inputs["ref"])
        found.append(Stage(*staged, step_id, hyp, test))
    return found


def choose_stage(recipe: Recipe, direction: str | None, stage: str | None) -> Stage:
    """The stage asked for; ``direction`` ``en-ja`` or ``enja``; ``stage`` defaults to the one
    the recipe's ``submitted`` names for the direction, else the direction's last. An unknown
    one is an error listing the valid ones."""
    found = stages(recipe)
    if not found:
        raise MtcoreError(
            f"recipe {recipe.name!r} has no stages to translate with: no step that scores a "
            "stage (an evaluate step named eval_<stage>_<direction>) with hyp and ref inputs"
        )
    directions = list(dict.fromkeys(s.direction for s in found))
    if direction is None:
        if len(directions) > 1:
            raise MtcoreError(f"give --direction, one of: {', '.join(directions)}")
        direction = directions[0]
    wanted = compact(direction)
    if wanted not in directions:
        raise MtcoreError(
            f"recipe {recipe.name!r} has no direction {direction!r}; valid: {', '.join(directions)}"
        )
    named = [s for s in found if s.direction == wanted]
    if stage is None:
        submitted = {compact(k): v for k, v in recipe.head.submitted.items()}.get(wanted)
        return next((s for s in named if s.name == submitted), named[-1])
    for candidate in named:
        if candidate.name == stage:
            return candidate
    valid = ", ".join(s.name for s in named)
    raise MtcoreError(f"direction {wanted!r} has no stage {stage!r}; valid (in order): {valid}")


def inference_path(recipe: Recipe, stage: Stage) -> list[str]:
    """The steps that lead from the stage's test set to its output through line-aligned
    inputs, dependencies first."""
    steps = recipe.steps
    on_path: set[str] = set()
    memo: dict[str, bool] = {}

    def reaches(node: str) -> bool:
        if node not in memo:
            memo[node] = False  # a cycle cannot happen in a valid recipe; stop anyway
            hit = False
            for role in steps[node].plugin.streams:
                ref = steps[node].inputs.get(role)
                if ref is None:
                    continue
                source = _resolve(recipe, ref)
                if source == stage.test or reaches(source[0]):
                    hit = True
            memo[node] = hit
            if hit:
                on_path.add(node)
        return memo[node]

    if not reaches(stage.hyp[0]):
        raise MtcoreError(
            f"stage {stage.name!r} ({stage.direction}): its output {'.'.join(stage.hyp)} does "
            f"not come line by line from its test set {'.'.join(stage.test)}: a step on the way "
            "does not declare which input it keeps line for line (Step.streams)"
        )
    return [s for s in topological_order(steps) if s in on_path]


def source_language(langs: Sequence[str], direction: str) -> str:
    """The test corpus column a direction such as ``enja`` translates from."""
    for src in langs:
        if any(direction == src + tgt for tgt in langs if tgt != src):
            return src
    raise MtcoreError(f"direction {direction!r} does not match the test set's languages {langs}")


def read_lines(
    path: Path, policy: InputPolicy, stats: Stats, shown: str | None = None
) -> list[str]:
    """The lines of ``path`` through the input policy; a line it would drop is an error (one
    output line per input line). ``shown`` names the input in errors (``<stdin>``)."""
    lines = []
    try:
        for number, text in LineReader(path, policy, stats):
            if text is None:
                raise DataError(
                    f"{path}:{number}: the input policy drops this line, and translate keeps "
                    "one output line per input line; fix the line (or use --repair)"
                )
            lines.append(text)
    except DataError as exc:
        if shown is None:
            raise
        raise DataError(str(exc).replace(str(path), shown)) from exc
    return lines


@dataclass
class Replay:
    """One step of an inference path, ready to run on new text. ``inputs`` maps each role it
    reads to ``("test", "")`` (the new lines), ``("step", "<id>/<output>")`` (an earlier
    replayed step's output) or ``("artifact", "<directory>")`` (a finished artifact)."""

    id: str
    kind: str
    hash: str
    plugin: Any
    inputs: dict[str, tuple[str, str]]


class Translator:
    """One stage of a system, ready to translate lists of lines: from a finished run
    (:meth:`from_run`) or from an exported directory (``mtcore.system.export.load_system``)."""

    def __init__(
        self,
        stage: Stage,
        replays: list[Replay],
        langs: tuple[str, ...],
        corpus_name: str,
        registry: Registry,
        executor: tuple[str, dict[str, Any]] = ("local", {}),
        show_progress: bool = False,
    ) -> None:
        self.stage, self.replays, self.registry = stage, replays, registry
        self.langs, self.corpus_name, self.executor = langs, corpus_name, executor
        self.source = source_language(langs, stage.direction)
        self.show_progress = show_progress
        self.test: Corpus | None = None  # the run's own test set, when loaded from a run
        self._held: Any = None  # the executor kept between calls by hold()

    @classmethod
    def from_run(
        cls,
        recipe: Recipe,
        registry: Registry,
        workdir: Path,
        direction: str | None = None,
        stage: str | None = None,
        device: str | None = None,
        show_progress: bool = False,
        build_hint: str | None = None,
    ) -> Translator:
        """A stage of the run in ``workdir``. ``build_hint``: the command that builds the run
        (for the error naming unfinished steps); ``device`` (auto, cpu, cuda) overrides the
        path steps' own."""
        chosen = choose_stage(recipe, direction, stage)
        path = inference_path(recipe, chosen)
        planned = {p.id: p for p in make_plan(recipe, registry)}
        _check_finished(recipe, workdir, planned, chosen, path, build_hint)
        replays = []
        for step_id in path:
            finished = step_dir(workdir, planned[step_id])
            plugin = _on_device(planned[step_id].spec.plugin, device)
            plugin, unread = plugin.for_new_text(finished)
            inputs = {}
            for role, ref in planned[step_id].spec.inputs.items():
                target, output = _resolve(recipe, ref)
                if role in unread:
                    continue
                if (target, output) == chosen.test:
                    inputs[role] = ("test", "")
                elif target in path:
                    inputs[role] = ("step", f"{target}/{output}")
                else:
                    inputs[role] = ("artifact", str(step_dir(workdir, planned[target]) / output))
            replays.append(Replay(step_id, planned[step_id].spec.kind, planned[step_id].hash,
                                  plugin, inputs))  # fmt: skip
        test = Corpus.open(step_dir(workdir, planned[chosen.test[0]]) / chosen.test[1])
        spec = recipe.head.executor
        system = cls(chosen, replays, test.langs, test.name, registry,
                     (spec.name, spec.settings()), show_progress)  # fmt: skip
        system.test = test
        return system

    def translate(self, lines: Sequence[str]) -> list[str]:
        """The stage's output for ``lines`` (no newlines inside), one line per line."""
        for number, line in enumerate(lines, 1):
            if "\n" in line or "\r" in line:
                raise DataError(f"input line {number} contains a line break")
        if not lines:
            return []
        with tempfile.TemporaryDirectory(prefix="mtcore-translate-") as name:
            return self._replay(Path(name), lines)

    def _replay(self, root: Path, lines: Sequence[str]) -> list[str]:
        test_dir = root / "test"
        writer = CorpusWriter(test_dir, self.langs, self.corpus_name)
        for line in lines:
            writer.write(tuple(line for _ in self.langs))
        writer.close()
        executor = self._held or self._new_executor()
        made: dict[str, Path] = {}
        try:
            for replay in self.replays:
                made[replay.id] = self._run_step(root, replay, test_dir, made, executor)
        finally:
            if executor is not self._held:
                executor.close()
        hyp_step, hyp_output = self.stage.hyp
        hyps = [pair[0] for pair in Corpus.open(made[hyp_step] / hyp_output)]
        if len(hyps) != len(lines):
            raise StepError(
                f"stage {self.stage.name!r}: {len(hyps)} output lines for {len(lines)} input "
                f"lines (step {hyp_step!r})"
            )
        return hyps

    def _new_executor(self) -> Any:
        return self.registry.load("executors", self.executor[0]).from_dict(self.executor[1])

    @property
    def held(self) -> Any:
        """The executor :meth:`hold` keeps, or None."""
        return self._held

    @contextmanager
    def hold(self, executor: Any = None) -> Iterator[Translator]:
        """Keeps one executor, its worker processes and the models they load, across
        :meth:`translate` calls (each call otherwise starts and ends its own): for a caller
        that translates again and again, such as ``mtcore serve``. Every worker keeps every
        model the stage loads (:data:`~mtcore.exec.shards.KEEP_MEMOS_ENV`). ``executor``:
        another translator's held one, to share (its holder ends it). Translate from one
        thread only: a worker process dies with the thread that started it."""
        if self._held is not None:
            raise MtcoreError("this translator is already held")
        with keep_worker_memos():
            self._held = executor or self._new_executor()
            try:
                yield self
            finally:
                held, self._held = self._held, None
                if executor is None:
                    # abort, not close: nothing is in flight once the caller leaves, and a
                    # worker already killed with the thread that started it (PR_SET_PDEATHSIG
                    # is per thread) may hold the pool's queue lock, which close would wait on
                    held.abort()

    def _run_step(
        self, root: Path, replay: Replay, test_dir: Path, made: dict[str, Path], executor: Any
    ) -> Path:
        inputs = {}
        for role, (where, what) in replay.inputs.items():
            if where == "test":
                inputs[role] = Artifact.open(test_dir)
            elif where == "step":
                step, output = what.split("/", 1)
                inputs[role] = Artifact.open(made[step] / output)
            else:
                inputs[role] = Artifact.open(Path(what))
        work = root / step_dirname(replay.id, replay.hash)
        work.mkdir()
        ctx = StepContext(
            step_id=replay.id,
            kind=replay.kind,
            step_hash=replay.hash,
            work=work,
            inputs=inputs,
            executor=executor,
            registry=self.registry,
            log=logging.getLogger(f"mtcore.translate.{replay.id}"),
            show_progress=self.show_progress,
        )
        run_plugin(replay.plugin, ctx, " on the new text")
        return work

    def translate_file(
        self, path: Path, policy: InputPolicy = STRICT_KEEP, shown: str | None = None
    ) -> tuple[list[str], Stats]:
        """The output for the lines of ``path``, and what the input policy repaired."""
        stats = Stats()
        return self.translate(read_lines(path, policy, stats, shown)), stats


def _on_device(plugin: Any, device: str | None) -> Any:
    if device is None or "device" not in type(plugin.config).model_fields:
        return plugin
    return type(plugin).from_dict({**config_dict(plugin.config), "device": device})


def _check_finished(
    recipe: Recipe,
    workdir: Path,
    planned: dict[str, PlannedStep],
    stage: Stage,
    path: list[str],
    build_hint: str | None,
) -> None:
    needed = {stage.test[0], *path}  # a replayed step may read its own output
    for step_id in path:
        for ref in recipe.steps[step_id].inputs.values():
            needed.add(split_reference(ref)[0])
    missing = [
        s
        for s in topological_order(recipe.steps)
        if s in needed and not is_complete(step_dir(workdir, planned[s]))
    ]
    if missing:
        raise MtcoreError(
            f"stage {stage.name!r} ({stage.direction}) needs steps that have not finished in "
            f"{workdir}: {', '.join(missing)}; build them with: "
            f"{build_hint or 'mtcore run RECIPE'} --until {stage.evaluate}"
        )


def build_hint(recipe: Path, profile: str | None, workdir: Path) -> str:
    """The ``mtcore run`` command that builds a run (named in the unfinished-steps error)."""
    return f"mtcore run {recipe}" + (f" -p {profile}" if profile else "") + f" -w {workdir}"


def load_translator(
    recipe_path: Path,
    direction: str | None = None,
    stage: str | None = None,
    profile: str | None = None,
    workdir: Path | None = None,
    sets: Iterable[str] = (),
    device: str | None = None,
) -> Translator:
    """The Python API: a finished run's stage, as ``mtcore translate`` loads it.

    >>> system = load_translator(Path("recipes/nt5.yaml"), "en-ja")   # doctest: +SKIP
    >>> system.translate(["Hello, world."])                            # doctest: +SKIP
    """
    from mtcore.contracts.registry import load_registry
    from mtcore.recipe.load import load_recipe

    registry = load_registry()
    recipe = load_recipe(recipe_path, registry, profile, list(sets))
    where = workdir if workdir is not None else Path("work") / recipe.name
    hint = build_hint(recipe_path, profile, where)
    return Translator.from_run(recipe, registry, where, direction, stage, device, build_hint=hint)

"""The cleaning chains of the recipes' paper profiles, run through real ``clean`` steps.

A chain is one ``clean`` step or several run one after the other (Yishu's rules, then its
alignment cut): each step cleans the previous one's output, exactly as ``mtcore run`` does.
Filters that need another step's artifact (a language model, held-out sets, trained
translation models) cannot run outside a recipe run: they are left out and named.
"""

from __future__ import annotations

import collections
import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Pair = tuple[str, str]
MODEL_FILTERS = frozenset({"embedding", "alignment", "translation_chrf", "lm"})


@dataclass(frozen=True)
class ChainSpec:
    """Steps of a recipe's paper profile run in order on one language pair; ``same`` lists
    steps with the same filters that are not run again."""

    recipe: str
    data: str
    steps: tuple[str, ...]
    langs: tuple[str, str]
    same: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return f"{self.recipe} {' -> '.join(self.steps)}: {self.data}, {'-'.join(self.langs)}"


CHAINS: dict[str, list[ChainSpec]] = {
    "nt5": [
        ChainSpec("nt5", "bitext", ("clean",), ("en", "ja")),
        ChainSpec("nt5", "synthetic", ("clean_bt_enja",), ("en", "ja"), ("clean_bt_jaen",)),
    ],
    "yishu": [
        ChainSpec("yishu", "bitext", ("rules", "align_filter", "lm_filter"), ("zh", "en")),
        ChainSpec("yishu", "synthetic", ("bt_clean_zhen",), ("zh", "en"), ("bt_clean_enzh",)),
    ],
    "xiaomi": [
        ChainSpec(
            "xiaomi", "bitext", ("clean_rules", "clean_model"), ("zh", "ja"), ("clean_pool",)
        ),
    ],
    "hwtsc": [
        ChainSpec("hwtsc", "bitext", ("clean",), ("en", "uk")),
        ChainSpec("hwtsc", "auxiliary bitext", ("aux_clean",), ("en", "cs")),
    ],
}
"""Xiaomi cleans no synthetic data (its monolingual text is length-filtered before BT) and
HW-TSC's paper profile none either; ``clean_pool`` holds the crawled pool to the rules of
``clean_rules``."""


def paper_steps(recipe: str) -> dict[str, dict[str, Any]]:
    from mtcore.recipe.load import read_yaml
    from mtcore.recipe.overrides import resolve_document

    path = Path(__file__).resolve().parents[1] / "recipes" / f"{recipe}.yaml"
    document, _ = resolve_document(read_yaml(path), "paper", [], recipe)
    return dict(document["steps"])


@dataclass
class Stage:
    """One clean step of a chain: its settings with only the runnable filters, and the
    filters left out (label, why)."""

    step: str
    settings: dict[str, Any]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def filters(self) -> list[Any]:
        return list(self.settings["filters"])

    def names(self) -> list[str]:
        return [entry_name(e) for e in self.filters]

    def without_cuts(self) -> Stage:
        """The stage with ``keep`` rules removed: ``threshold_too`` entries keep their own
        threshold, pure ranked entries go."""
        entries = []
        for entry in self.filters:
            keep = entry.get("keep") if isinstance(entry, dict) else None
            if keep is None:
                entries.append(entry)
            elif keep.get("threshold_too"):
                entries.append({k: v for k, v in entry.items() if k != "keep"})
        return Stage(self.step, {**self.settings, "filters": entries}, self.skipped)

    def has_cuts(self) -> bool:
        return any(isinstance(e, dict) and e.get("keep") for e in self.filters)


def entry_name(entry: Any) -> str:
    return entry if isinstance(entry, str) else str(entry["name"])


def stages(spec: ChainSpec, registry: Any) -> tuple[list[Stage], list[str]]:
    """The chain's stages and notes (steps missing from the profile, ``same`` steps that
    differ)."""
    from mtcore_plugins.steps.clean import CleanConfig

    steps = paper_steps(spec.recipe)
    notes, out = [], []
    for step_id in spec.steps:
        if step_id not in steps:
            notes.append(f"{step_id}: not in the paper profile")
            continue
        # the clean step's own settings (kind, inputs and the like are the runner's)
        settings = {k: v for k, v in steps[step_id].items() if k in CleanConfig.model_fields}
        stage = _runnable(step_id, settings, spec.langs, registry)
        out.append(stage)
    first = steps.get(spec.steps[0], {}).get("filters") or []
    for other in spec.same:
        theirs = steps.get(other, {}).get("filters") or []
        differ = [entry_name(b) for a, b in zip(first, theirs, strict=False) if a != b]
        if differ or len(first) != len(theirs):
            notes.append(
                f"{other}: not run, its filters differ from {spec.steps[0]}'s "
                f"({', '.join(differ) or 'count'})"
            )
        else:
            notes.append(f"{other}: the same filters as {spec.steps[0]} (not run again)")
    return out, notes


def _runnable(step_id: str, settings: dict[str, Any], langs: Sequence[str], registry: Any):
    """Builds each filter with no step inputs connected: one that asks for a step input is
    left out."""
    from mtcore.chain.filtering import make_specs
    from mtcore.contracts.errors import PluginError

    kept, skipped = [], []
    entries = settings.get("filters", [])
    for entry, spec in zip(entries, make_specs(entries), strict=True):
        try:
            spec.build(registry, tuple(langs), {})
        except PluginError as exc:
            if "needs the step input" not in str(exc):
                raise
            skipped.append((f"{step_id}.{spec.label}", str(exc).split(" (")[0]))
            continue
        kept.append(entry)
    return Stage(step_id, {**settings, "filters": kept}, skipped)


# --- running -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """Per input pair: kept or not, and the label (``step.filter``) of what dropped it."""

    kept: np.ndarray
    dropped_by: list[str | None]
    seconds: float = 0.0


def write_corpus(folder: Path, pairs: Sequence[Pair], langs: tuple[str, str]) -> Path:
    from mtcore.data.corpus import CorpusWriter

    with CorpusWriter(folder, langs) as writer:
        for pair in pairs:
            writer.write(pair)
    return folder


def read_corpus(folder: Path, langs: tuple[str, str]) -> list[Pair]:
    sides = [(folder / f"corpus.{lang}").read_text("utf-8").split("\n")[:-1] for lang in langs]
    return list(zip(sides[0], sides[1], strict=True))


def kept_mask(inputs: Sequence[Pair], outputs: Sequence[Pair]) -> np.ndarray:
    """Which inputs appear in ``outputs``, a subsequence of them (both in corpus order)."""
    mask = np.zeros(len(inputs), dtype=bool)
    j = 0
    for i, pair in enumerate(inputs):
        if j < len(outputs) and outputs[j] == pair:
            mask[i] = True
            j += 1
    if j != len(outputs):
        raise SystemExit("a clean step's output is not a subsequence of its input")
    return mask


def run_chain(
    stages_: Sequence[Stage],
    pairs: Sequence[Pair],
    langs: tuple[str, str],
    work: Path,
    executor: Any,
    registry: Any,
) -> Outcome:
    """Runs the stages as clean steps, each on the previous one's output."""
    import time

    start = time.perf_counter()
    alive = np.arange(len(pairs))
    dropped_by: list[str | None] = [None] * len(pairs)
    corpus = write_corpus(work / "input", pairs, langs)
    current = list(pairs)
    for number, stage in enumerate(stages_):
        if not stage.filters:
            continue
        folder = work / f"{number}-{stage.step}"
        counted = _clean(stage, corpus, folder, executor, registry)
        corpus = folder / "corpus"
        output = read_corpus(corpus, langs)
        mask = kept_mask(current, output)
        queues = _reject_queues(folder / "rejects", _stateful(stage, registry))
        found: collections.Counter[str] = collections.Counter()
        for index in np.flatnonzero(~mask):
            label = queues["\t".join(current[index])].popleft()
            dropped_by[int(alive[index])] = f"{stage.step}.{label}"
            found[label] += 1
        if found != collections.Counter({k: v for k, v in counted.items() if v}):
            raise SystemExit(f"{stage.step}: drops {dict(found)} but the step counted {counted}")
        alive, current = alive[mask], output
    kept = np.zeros(len(pairs), dtype=bool)
    kept[alive] = True
    return Outcome(kept, dropped_by, time.perf_counter() - start)


def _clean(stage: Stage, corpus: Path, folder: Path, executor: Any, registry: Any):
    """Runs the stage's clean step on ``corpus`` into ``folder`` (every reject written
    out); returns its drop counters by filter label."""
    from mtcore.contracts.step import Artifact, StepContext
    from mtcore_plugins.steps.clean import CleanStep

    step = CleanStep.from_dict({**stage.settings, "reject_samples": 100_000})
    problems = step.check(registry)
    if problems:
        raise SystemExit(f"{stage.step}: {problems}")
    ctx = StepContext(
        step_id=stage.step,
        kind="clean",
        step_hash="bench",
        work=folder,
        inputs={"corpus": Artifact.open(corpus)},
        executor=executor,
        registry=registry,
        show_progress=False,
    )
    step.run(ctx)  # type: ignore[arg-type]
    prefix = "dropped."
    stats = ctx.stats.as_dict().items()
    return {k[len(prefix) :]: int(v) for k, v in stats if k.startswith(prefix)}


def before_cuts(
    stages_: Sequence[Stage],
    final: Outcome,
    pairs: Sequence[Pair],
    langs: tuple[str, str],
    work: Path,
    executor: Any,
    registry: Any,
) -> Outcome | None:
    """The chain's outcome without its ranked cuts (``Stage.without_cuts``), or None when it
    has none. Ranked entries come last in a step, so when only the chain's last step ranks,
    the pairs a cut dropped are the only ones that change: those a ``threshold_too`` entry's
    own threshold keeps, or all of them for a pure ranked entry. Otherwise (or when the
    threshold depends on the batch) the chain runs again without its cuts."""
    import time

    from mtcore.chain.filtering import make_specs

    if not any(stage.has_cuts() for stage in stages_):
        return None
    last = [stage for stage in stages_ if stage.filters][-1]
    ranked = [
        (f"{last.step}.{spec.label}", entry)
        for entry, spec in zip(last.filters, make_specs(last.filters), strict=True)
        if isinstance(entry, dict) and entry.get("keep")
    ]
    again = any(s.has_cuts() for s in stages_ if s is not last) or any(
        entry["keep"].get("threshold_too")
        and registry.load("filters", entry["name"]).batch_dependent
        for _, entry in ranked
    )
    if again:
        plain = [stage.without_cuts() for stage in stages_]
        return run_chain(plain, pairs, langs, work, executor, registry)
    start = time.perf_counter()
    kept, dropped_by = final.kept.copy(), list(final.dropped_by)
    for number, (label, entry) in enumerate(ranked):
        rows = [i for i, by in enumerate(final.dropped_by) if by == label]
        if entry["keep"].get("threshold_too") and rows:
            alone = {k: v for k, v in entry.items() if k != "keep"}
            check = Stage(last.step, {**last.settings, "filters": [alone]})
            sub = [pairs[i] for i in rows]
            passed = run_chain([check], sub, langs, work / str(number), executor, registry).kept
            rows = [r for r, ok in zip(rows, passed, strict=True) if ok]
        for row in rows:
            kept[row], dropped_by[row] = True, None
    return Outcome(kept, dropped_by, time.perf_counter() - start)


def _stateful(stage: Stage, registry: Any) -> set[str]:
    from mtcore.chain.filtering import make_specs

    specs = make_specs(stage.filters)
    return {s.label for s in specs if registry.load("filters", s.name).stateful}


def _reject_queues(folder: Path, stateful: set[str]) -> dict[str, deque[str]]:
    """The filter label of each rejected line, keyed by the line, in corpus order. A line
    rejected more than once is a pair that occurs more than once: a stateless filter rejects
    every copy that reaches it alike, deduplication only the later ones, so its labels go
    last."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text("utf-8").split("\n")[:-1]:
            found[line].append(path.stem)
    return {
        line: deque(sorted(labels, key=lambda label: label in stateful))
        for line, labels in found.items()
    }


def chain_targets(stages_: Sequence[Stage], registry: Any) -> dict[str, float | None]:
    """The drop rate each defect must reach, or None where the chain does not target it
    (from the filters that run; see docs/cleaning.md, Cleaning quality)."""
    from _cleaning_data import TRUNCATE_TO

    names: set[str] = set()
    ratios: list[float] = []
    copy_by_similarity = False
    min_length = False
    for stage in stages_:
        for entry in stage.filters:
            name = entry_name(entry)
            names.add(name)
            config = filter_config(registry, entry)
            if name == "length_ratio":
                ratios.append(float(config["max_ratio"]))
            if name == "embedding" and config.get("max_similarity", 1.0) < 1.0:
                copy_by_similarity = True
            if name == "length" and config.get("min_length", 0) >= 1:
                min_length = True
    shortest = min(ratios, default=math.inf)
    rules = {
        "third_language": bool(names & {"langid", "script_ratio"}),
        "copy": bool(names & {"identical", "langid", "script_ratio"}) or copy_by_similarity,
        "misaligned": bool(names & MODEL_FILTERS),
        "markup": bool(names & {"markup", "html_tag"}),
        "char_repetition": bool(names & {"char_repetition", "repetition"}),
        "truncation": shortest < 1 / TRUNCATE_TO,
        "repeated": "repetition" in names or shortest < 2,
        "empty": bool(names & {"empty", "length_ratio"}) or min_length,
        "duplicate": "dedup" in names,
    }
    targets: dict[str, float | None] = {"clean": 0.97}
    for defect, targeted in rules.items():
        targets[defect] = (0.90 if defect == "misaligned" else 0.95) if targeted else None
    return targets


def filter_config(registry: Any, entry: Any) -> dict[str, Any]:
    from mtcore.chain.filtering import ENGINE_KEYS

    settings = {} if isinstance(entry, str) else {k: v for k, v in entry.items()}
    settings = {k: v for k, v in settings.items() if k not in ENGINE_KEYS}
    cls = registry.load("filters", entry_name(entry))
    return dict(cls.Config.model_validate(settings).model_dump())

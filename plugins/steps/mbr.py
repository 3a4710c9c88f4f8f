"""Minimum Bayes risk decoding (Kumar & Byrne 2004; Freitag et al. 2022, 2023): of each source
line's candidate translations, output the one with the highest expected utility against the
model's other translations of the line, which stand in for the unknown reference.

Inputs: ``nbest`` (the candidates: a translate step's ``nbest`` output, beam n-best or
samples), optionally ``pseudo_refs`` (a second n-best of the same source lines, typically
samples, used as the pseudo-references instead of the candidates themselves), and any other
role the utility metric reads in ``setup`` (a COMET model fetched by id). For line ``s`` with
candidates ``c_1..c_N`` (the first ``candidates`` of its list) and pseudo-references
``r_1..r_M`` (the first ``pseudo_references`` of ``pseudo_refs``, else of ``nbest``)::

    EU(c) = (1/M) * sum_j utility(c, r_j)        chosen = argmax_c EU(c)

(argmin for a metric whose ``higher_is_better`` is False, such as MetricX or TER); a tie goes
to the earliest candidate, the decoder's preferred one. Nothing is excluded: a candidate is
scored against itself too when it is also a pseudo-reference, as Freitag et al. (2022, 2023)
and the ``mbr`` package (Vamvas & Sennrich) do; COMET's ``comet-mbr`` command leaves out the
candidate's own position instead. Pseudo-references are a Monte Carlo sample of the model's
distribution, so one drawn twice counts twice (it is scored once and weighted by its count);
identical candidates are scored once and share the value, and the first of them is the one
chosen. Sums are exact (``math.fsum``), so a tie does not depend on the order of addition.

The utility is any metric plugin with :meth:`~mtcore.api.Metric.segment_scores` (chrf, the
default; sentence_bleu; comet; metricx): each shard makes one ``segment_scores`` call with
every (candidate, pseudo-reference) pair of its lines, so a neural metric embeds each distinct
text once and batches across lines. A metric that reads the source (``needs_source``) gets
each pair's source line from the n-best.

Candidates from sampling: the ``translate`` step draws ``nbest`` samples per line with
``sampling: true`` (``sampling_topk`` / ``sampling_topp`` / ``temperature`` shape them)::

    samples: {kind: translate, src: en, tgt: ja, sampling: true, sampling_topp: 0.9,
              nbest: 32, inputs: {model: enja, spm: spm, corpus: split.test}}
    mbr:     {kind: mbr, inputs: {nbest: samples.nbest}, utility: chrf}

or beam candidates judged against samples: ``inputs: {nbest: beam.nbest, pseudo_refs:
samples.nbest}``.

Outputs: ``hyp``, the chosen translation of every line (a one-language corpus, one line per
n-best entry), and ``scores``, the candidates as an n-best list with their expected utility
added as the ``feature`` column (``mbr``), which a ``rerank`` step can weigh. The work runs on
the executor's workers shard by shard, each shard's result saved as it arrives, so a killed
run resumes without scoring finished shards again.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import zip_longest
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import (
    Artifact,
    CorpusWriter,
    DataError,
    Metric,
    PluginConfig,
    PluginError,
    Registry,
    Step,
    StepContext,
    StepError,
    components,
    load_registry,
    map_shards,
    worker_memo,
)
from mtcore.api.engine import build_metrics, entry_name, worker_forget
from mtcore_plugins.steps._nbest import Entry, NBestWriter, open_nbest, read_nbest
from mtcore_plugins.steps._translate_config import worker_threads

OWN_INPUTS = ("nbest", "pseudo_refs")

Row = tuple[str, list[str], list[str]]
"""One source line: its text, its candidates, its pseudo-references."""


class MbrConfig(PluginConfig):
    utility: str | dict[str, Any] = Field(
        "chrf",
        description="utility metric (name or {name, settings}), any metric with segment "
        "scores: chrf, sentence_bleu, comet, metricx",
        json_schema_extra=components("metrics"),
    )
    candidates: int | None = Field(
        None, ge=1, le=100_000, description="candidates per line: the first N of each list; "
        "default all",
    )  # fmt: skip
    pseudo_references: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="pseudo-references per line: the first M of each pseudo_refs list (of the "
        "nbest list without pseudo_refs); default all",
    )
    feature: str = Field(
        "mbr",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        max_length=64,
        description="name of the expected-utility column of the scores n-best",
    )
    shard_size: int = Field(
        100, ge=1, le=1_000_000, description="source lines per shard (per segment_scores call)"
    )
    threads: int = Field(
        0, ge=0, le=512, description="torch threads per worker (neural utilities); 0 shares "
        "the cores out",
    )  # fmt: skip


def has_segment_scores(cls: type[Any]) -> bool:
    return getattr(cls, "segment_scores", None) is not Metric.segment_scores


def utility_problem(registry: Registry, name: str) -> str | None:
    """Why metric ``name`` cannot be an MBR utility (None when it can); an unknown name is the
    component check's to report."""
    try:
        cls = registry.load("metrics", name)
    except PluginError:
        return None
    if not has_segment_scores(cls):
        valid = []
        for other in registry.names("metrics"):
            try:
                other_cls = registry.load("metrics", other)
            except PluginError:
                continue
            if has_segment_scores(other_cls) and getattr(other_cls, "needs_reference", True):
                valid.append(other)
        return (
            f"metric {name!r} has no segment scores, so it cannot be an MBR utility; "
            f"valid: {', '.join(valid) or '(none installed)'}"
        )
    if not getattr(cls, "needs_reference", True):
        return (
            f"metric {name!r} is reference-free (quality estimation): its score ignores the "
            "pseudo-references, so MBR would be reranking by it; choose a reference-based metric"
        )
    return None


def settings_problem(registry: Registry, utility: str | dict[str, Any]) -> str | None:
    """Why the utility, with its settings, cannot be an MBR utility: a metric whose settings
    turn the references off (``xcomet`` with ``reference: false``) is quality estimation."""
    try:
        metric = build_metrics(registry, [utility])[0]
    except (PluginError, ValueError):
        return None  # the component check reports bad settings
    uses = getattr(metric, "uses_references", None)
    if callable(uses) and not uses():
        return (
            f"metric {metric.name!r} with these settings ignores references (quality "
            "estimation), so MBR would be reranking by it; choose a reference-based utility"
        )
    return None


class MbrStep(Step[MbrConfig]):
    """Candidates (+ pseudo-references) + utility -> the expected-utility maximizer per line."""

    parallel = True  # its shards go through ctx.executor

    name = "mbr"
    inputs: ClassVar[dict[str, bool]] = {"nbest": True, "pseudo_refs": False, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("hyp", "scores")
    streams: ClassVar[tuple[str, ...]] = OWN_INPUTS

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        problems = super().check(registry)
        name = entry_name(self.config.utility)
        problem = utility_problem(registry, name) if name is not None else None
        if problem is None and name is not None:
            problem = settings_problem(registry, self.config.utility)
        if problem is not None:
            problems.append(("utility", problem))
        return problems

    def run(self, ctx: StepContext) -> None:
        config = self.config
        utility_name = str(entry_name(config.utility))
        problem = utility_problem(ctx.registry, utility_name) or settings_problem(
            ctx.registry, config.utility
        )
        if problem is not None:
            raise StepError(f"{ctx.step_id}: {problem}")
        higher = getattr(ctx.registry.load("metrics", utility_name), "higher_is_better", True)
        nbest = open_nbest(ctx.inputs["nbest"], "nbest", ctx.step_id)
        src, tgt = str(nbest.meta["src"]), str(nbest.meta["tgt"])
        if config.feature in nbest.meta.get("features", []):
            raise StepError(
                f"{ctx.step_id}: the n-best already has a {config.feature!r} column; name the "
                "expected-utility column otherwise (feature: ...)"
            )
        pseudo = self._pseudo_refs(ctx, nbest)
        resources = tuple(
            sorted((r, str(a.path)) for r, a in ctx.inputs.items() if r not in OWN_INPUTS)
        )
        utility = json.dumps(config.utility, sort_keys=True)
        threads = worker_threads(config.threads, ctx.executor)
        results = map_shards(
            ctx.executor,
            mbr_task,
            shards(nbest_file(nbest), pseudo, config, ctx.step_id),
            lambda shard: (utility, resources, threads, tgt, [row for _, row in shard]),
            ctx.scratch("mbr"),
        )
        scores = NBestWriter(ctx.output("scores"), src, tgt)
        lines = changed = pairs = 0
        chosen_total = 0.0
        bar = ctx.progress(nbest.meta.get("lines"), "MBR")
        with CorpusWriter(ctx.output("hyp"), (tgt,), name="hyp") as hyp, _forgetting():
            for shard, (values, shard_pairs) in results:
                for (entry, _), expected in zip(shard, values, strict=True):
                    best = choose(expected, higher is not False)
                    hyp.write((entry.hyps[best][0],))
                    scored = [
                        (text, {**columns, config.feature: value})
                        for (text, columns), value in zip(entry.hyps, expected, strict=True)
                    ]
                    scores.write(Entry(entry.id, entry.source, scored))
                    changed += best != 0
                    chosen_total += expected[best]
                lines += len(shard)
                pairs += shard_pairs
                bar.update(len(shard))
        bar.close()
        listed = nbest.meta.get("n")
        scores.close(
            n=min(config.candidates, listed) if config.candidates and listed else listed,
            utility=utility_name,
            pseudo_refs="pseudo_refs" if pseudo is not None else "nbest",
        )
        ctx.stats.add("mbr.lines", lines)
        ctx.stats.add("mbr.changed", changed)
        ctx.stats.add("mbr.pairs", pairs)
        ctx.metrics["expected_utility"] = round(chosen_total / lines, 4) if lines else 0.0

    def _pseudo_refs(self, ctx: StepContext, nbest: Artifact) -> Path | None:
        if "pseudo_refs" not in ctx.inputs:
            return None
        pseudo = open_nbest(ctx.inputs["pseudo_refs"], "pseudo_refs", ctx.step_id)
        for key in ("tgt", "lines"):
            if pseudo.meta.get(key) != nbest.meta.get(key):
                raise DataError(
                    f"{ctx.step_id}: pseudo_refs has {key} {pseudo.meta.get(key)!r}, the nbest "
                    f"{nbest.meta.get(key)!r}: pseudo-references translate the same source "
                    "lines into the same language"
                )
        return nbest_file(pseudo)


@contextmanager
def _forgetting() -> Iterator[None]:
    """Frees the utility (a neural model) built in this process when tasks ran here."""
    try:
        yield
    finally:
        worker_forget("mbr")


def nbest_file(artifact: Artifact) -> Path:
    return artifact.file("file", "nbest.jsonl")


def shards(
    nbest: Path, pseudo: Path | None, config: MbrConfig, step_id: str
) -> Iterator[list[tuple[Entry, Row]]]:
    """The n-best's entries cut to their candidates, with each line's row, ``shard_size``
    lines at a time."""
    n, m = config.candidates, config.pseudo_references
    others: Iterator[Entry | None] = read_nbest(pseudo) if pseudo is not None else iter(())
    batch: list[tuple[Entry, Row]] = []
    for entry, other in zip_longest(read_nbest(nbest), others):
        if entry is None or (pseudo is not None and other is None):
            raise DataError(f"{step_id}: nbest and pseudo_refs have different numbers of lines")
        if other is not None and entry.source and other.source and entry.source != other.source:
            raise DataError(
                f"{step_id}: line {entry.id + 1} has source {entry.source[:80]!r} in nbest but "
                f"{other.source[:80]!r} in pseudo_refs: both must translate the same lines"
            )
        refs = [text for text, _ in (other or entry).hyps[:m]]
        entry.hyps = entry.hyps[:n]
        batch.append((entry, (entry.source, [text for text, _ in entry.hyps], refs)))
        if len(batch) == config.shard_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _utility(utility: str, resources: tuple[tuple[str, str], ...]) -> Metric:
    """The utility metric, built and set up once per worker process."""

    def build() -> Metric:
        metric = build_metrics(load_registry(), [json.loads(utility)])[0]
        metric.setup({role: Path(path) for role, path in resources})
        return metric

    built: Metric = worker_memo(("mbr", utility, resources), build, only=True)
    return built


Task = tuple[str, tuple[tuple[str, str], ...], int, str, list[Row]]


def mbr_task(task: Task) -> tuple[list[list[float]], int]:
    """Executor task: the expected utility of every candidate of one shard's lines, and the
    number of pairs scored."""
    utility, resources, threads, lang, rows = task
    metric = _utility(utility, resources)
    if threads and metric.heavy and "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    return expected_utilities(metric, rows, lang)


def expected_utilities(
    metric: Metric, rows: Sequence[Row], lang: str
) -> tuple[list[list[float]], int]:
    """Per row, the expected utility of each candidate (in candidate order, duplicates
    included) over the row's pseudo-references, from one ``segment_scores`` call over every
    distinct (candidate, pseudo-reference) pair of every row; and the number of pairs."""
    hyps: list[str] = []
    refs: list[str] = []
    sources: list[str] = []
    plan: list[tuple[int, dict[str, int], dict[str, int]]] = []
    for source, candidates, pseudo_refs in rows:
        if not candidates or not pseudo_refs:
            raise DataError(f"line {source[:80]!r}: no candidates or no pseudo-references")
        unique_c = {text: i for i, text in enumerate(dict.fromkeys(candidates))}
        unique_r = {text: j for j, text in enumerate(dict.fromkeys(pseudo_refs))}
        plan.append((len(hyps), unique_c, unique_r))
        for candidate in unique_c:
            hyps.extend([candidate] * len(unique_r))
            refs.extend(unique_r)
            sources.extend([source] * len(unique_r))
    if metric.needs_source:
        scores = metric.segment_scores(hyps, [refs], lang, sources=sources)
    else:
        scores = metric.segment_scores(hyps, [refs], lang)
    if len(scores) != len(hyps):
        raise StepError(
            f"metric {metric.name!r} returned {len(scores)} segment scores for {len(hyps)} pairs"
        )
    out = []
    for (start, unique_c, unique_r), (_, candidates, pseudo_refs) in zip(plan, rows, strict=True):
        width = len(unique_r)
        columns = [unique_r[text] for text in pseudo_refs]
        expected = []
        for candidate, i in unique_c.items():
            row = [float(scores[start + i * width + j]) for j in columns]
            if not all(math.isfinite(value) for value in row):
                raise StepError(
                    f"metric {metric.name!r} scored a non-finite utility for candidate "
                    f"{candidate[:80]!r}"
                )
            expected.append(math.fsum(row) / len(row))
        out.append([expected[unique_c[text]] for text in candidates])
    return out, len(hyps)


def choose(expected: Sequence[float], higher_is_better: bool = True) -> int:
    """The index of the best expected utility; the first of equal ones."""
    best = 0
    for i, value in enumerate(expected):
        if value > expected[best] if higher_is_better else value < expected[best]:
            best = i
    return best

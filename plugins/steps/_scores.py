"""Score tables between steps: the ``score`` step's ``scores.tsv`` (a header of filter labels,
one row of numbers per pair), read and written by the steps that rank, select or deduplicate
by score, and the kept pairs of a corpus written with their bytes unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.api import (
    BlockReader,
    Corpus,
    CorpusWriter,
    DataError,
    StepContext,
    write_artifact_meta,
)

SCORES_FILE = "scores.tsv"
SHARD = 100_000  # pairs per block when writing the kept lines
REJECT_SAMPLES = 50  # rejected pairs a selecting step keeps per reason (the clean step's default)


def write_kept(
    out: Path, corpus: Corpus, keep: np.ndarray, done: Callable[[int], object] = lambda _: None
) -> None:
    """The pairs of ``corpus`` that ``keep`` marks, in corpus order, their bytes unchanged;
    ``done(n)`` after each ``n`` pairs read."""
    with CorpusWriter(out, corpus.langs) as writer:
        start = 0
        for raw in BlockReader(corpus.files(), SHARD):
            mask = keep[start : start + raw.count]
            sides = [raw.kept_bytes(side, mask) for side in range(len(raw.raws))]
            writer.write_raw(sides, int(mask.sum()))
            start += raw.count
            done(raw.count)


def write_scores(out: Any, header: list[str], table: np.ndarray) -> None:
    """A score table in the score step's format (so that selections can be chained)."""
    with open(out / SCORES_FILE, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\t".join(header) + "\n")
        if len(table):
            np.savetxt(handle, table, fmt="%.9g", delimiter="\t")
    write_artifact_meta(out, type="scores", columns=header, lines=len(table))


def read_scores(path: Path) -> tuple[list[str], np.ndarray]:
    """The columns and the (pairs, columns) table of a score step's output directory."""
    with open(path / SCORES_FILE, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("\t")
        table = np.loadtxt(handle, delimiter="\t", ndmin=2, dtype=np.float64)
    return header, table.reshape(-1, len(header))


def scores_input(
    ctx: StepContext, column: str | None, total: int
) -> tuple[list[str] | None, np.ndarray | None, np.ndarray | None]:
    """The optional ``scores`` input of a step that keeps one pair of a group by score: its
    header and table (checked to have ``total`` rows) and the values of ``column``; Nones
    where the step has no such input. ``column`` without the input, a column the table lacks
    or a table of another length are errors naming the file."""
    artifact = ctx.inputs.get("scores")
    if artifact is None:
        if column is not None:
            raise DataError(
                f"{ctx.step_id}: column {column!r} names a score column, but the step has no "
                f"`scores` input (a score step's output for the same corpus)"
            )
        return None, None, None
    if artifact.type != "scores":
        raise DataError(
            f"{ctx.step_id}: input scores ({artifact.path}) is not a score step's output "
            f"(artifact type {artifact.type!r})"
        )
    header, table = read_scores(artifact.path)
    if len(table) != total:
        raise DataError(
            f"{ctx.step_id}: {artifact.path / SCORES_FILE} has {len(table)} rows but the "
            f"corpus has {total} pairs: score the same corpus you deduplicate"
        )
    if column is None:
        return header, table, None
    if column not in header:
        raise DataError(
            f"{ctx.step_id}: score column {column!r} is not in {artifact.path / SCORES_FILE} "
            f"(columns: {', '.join(header)})"
        )
    return header, table, table[:, header.index(column)]


def write_reject_sample(out: Path, label: str, lines: list[str], scores: list[str]) -> None:
    """``<label>.tsv`` (a rejected pair a line, sides joined by tabs) and, where any pair has a
    score, ``<label>.scores`` (line i: the score of pair i, as text): what the run page shows
    of the pairs a filter or a cut dropped."""
    with open(out / f"{label}.tsv", "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(line + "\n" for line in lines)
    if any(scores):
        with open(out / f"{label}.scores", "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(score + "\n" for score in scores)


def write_rejects(
    out: Path,
    corpus: Corpus,
    dropped: dict[str, np.ndarray],
    scores: np.ndarray,
    samples: int = REJECT_SAMPLES,
) -> None:
    """For each reason (``dropped.rank``: a mask over ``corpus``), the first ``samples`` pairs
    it dropped and their ``scores``, as :func:`write_reject_sample` writes them (``rank.tsv``,
    ``rank.scores``)."""
    wanted = {reason: np.flatnonzero(rows)[:samples] for reason, rows in dropped.items()}
    lines: dict[str, list[str]] = {reason: [] for reason in wanted}
    last = max((int(rows[-1]) for rows in wanted.values() if len(rows)), default=-1)
    start = 0
    for raw in BlockReader(corpus.files(), SHARD) if last >= 0 else ():
        for reason, rows in wanted.items():
            inside = rows[(rows >= start) & (rows < start + raw.count)]
            lines[reason] += [raw.pair(int(row) - start) for row in inside]
        start += raw.count
        if start > last:
            break
    for reason, rows in wanted.items():
        shown = [f"{value:.4g}" for value in scores[rows]]
        write_reject_sample(out, reason.removeprefix("dropped."), lines[reason], shown)

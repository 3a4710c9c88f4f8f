"""n-best lists as JSON lines (Sockeye's and Marian's n-best output, one JSON object a line):

    {"id": 0, "source": "...", "hyps": [{"text": "...", "scores": {"fwd": -0.41}}, ...]}

``id`` counts input lines from 0; every input line has exactly one entry, in order, with at
least one hypothesis (an empty source gets one empty hypothesis). ``scores`` holds named
features: the translate step writes ``fwd`` (the decoding model's mean log-probability per
token, EOS included); the rerank step adds one column per scorer. The artifact is
``nbest.jsonl`` plus ``artifact.json`` (``type: nbest``, ``src``, ``tgt``, ``lines``, ``n``,
``features``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mtcore.api import Artifact, DataError, write_artifact_meta

FILE = "nbest.jsonl"


@dataclass
class Entry:
    """One input line's hypotheses, best first as the decoder ranked them."""

    id: int
    source: str
    hyps: list[tuple[str, dict[str, float]]] = field(default_factory=list)

    def to_json(self) -> str:
        hyps = [{"text": text, "scores": scores} for text, scores in self.hyps]
        return json.dumps({"id": self.id, "source": self.source, "hyps": hyps}, ensure_ascii=False)


class NBestWriter:
    """Writes ``nbest.jsonl`` entry by entry; ``close`` records the artifact metadata."""

    def __init__(self, path: Path, src: str, tgt: str, file: str = FILE) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path, self.src, self.tgt, self.file = path, src, tgt, file
        self.handle: IO[str] = open(path / file, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self.lines = 0
        self.features: dict[str, None] = {}

    def write(self, entry: Entry) -> None:
        if entry.id != self.lines:
            raise DataError(
                f"{self.path / self.file}: entry id {entry.id} written as line {self.lines}"
            )
        for _, scores in entry.hyps:
            self.features.update(dict.fromkeys(scores))
        self.handle.write(entry.to_json() + "\n")
        self.lines += 1

    def write_many(
        self, first: int, sources: Sequence[str], lists: Sequence[Sequence[tuple[str, float]]]
    ) -> None:
        """Entries ``first``, ``first + 1``, ... from decoder output (text, fwd score)."""
        for offset, (source, hyps) in enumerate(zip(sources, lists, strict=True)):
            scored = [(text, {"fwd": round(score, 6)}) for text, score in hyps]
            self.write(Entry(first + offset, source, scored))

    def finish(self) -> None:
        """Closes the file without writing ``artifact.json`` (an n-best kept beside another
        artifact)."""
        self.handle.close()

    def close(self, **extra: Any) -> None:
        self.handle.close()
        write_artifact_meta(
            self.path,
            type="nbest",
            src=self.src,
            tgt=self.tgt,
            lines=self.lines,
            file=self.file,
            features=list(self.features),
            **extra,
        )


def open_nbest(artifact: Artifact, role: str, step_id: str) -> Artifact:
    """``artifact`` checked to be an n-best list."""
    if artifact.type != "nbest":
        raise DataError(
            f"{step_id}: input {role} ({artifact.path}) is not an n-best list (artifact type "
            f"{artifact.type!r}); connect a translate step's nbest output (set nbest: N there "
            "and refer to it as <step>.nbest)"
        )
    return artifact


def read_nbest(path: Path) -> Iterator[Entry]:
    """Entries of ``path`` (an ``nbest.jsonl``), checked: ids count up from 0, every entry has
    hypotheses with text and finite numeric scores. Errors name the file and line."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            yield parse_entry(line, path, number)


def parse_entry(line: str, path: Path, number: int) -> Entry:
    where = f"{path}:{number}"
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict) or not isinstance(value.get("hyps"), list):
        raise DataError(f"{where}: an entry is an object with id, source and a list of hyps")
    if value.get("id") != number - 1:
        raise DataError(
            f"{where}: id {value.get('id')!r}, expected {number - 1} (one entry per input line, "
            "in order, ids from 0)"
        )
    if not value["hyps"]:
        raise DataError(f"{where}: no hypotheses (an entry needs at least one)")
    hyps = []
    for rank, hyp in enumerate(value["hyps"]):
        text = hyp.get("text") if isinstance(hyp, dict) else None
        scores = hyp.get("scores", {}) if isinstance(hyp, dict) else None
        if not isinstance(text, str) or not isinstance(scores, dict):
            raise DataError(f"{where}: hyps[{rank}] needs a text string and a scores object")
        for name, score in scores.items():
            if not isinstance(score, int | float) or not math.isfinite(score):
                raise DataError(
                    f"{where}: hyps[{rank}].scores.{name} is {score!r}, not a finite number"
                )
        hyps.append((text, {str(k): float(v) for k, v in scores.items()}))
    return Entry(int(value["id"]), str(value.get("source", "")), hyps)

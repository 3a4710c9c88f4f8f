"""Streaming, line-aligned corpus I/O with explicit handling of bad input.

A corpus on disk is one plain-text file per language (``corpus.en``, ``corpus.ja``), line i of
each being one segment, plus ``artifact.json``. Reading never loads a file into memory and
never splits a line anywhere but at ``\\n``: every other line-break character (``\\r``, U+2028,
...) would make Python's universal newlines, ``str.splitlines`` or a downstream tool such as
fairseq-preprocess see two lines where there is one and misalign the corpus.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Literal

from pydantic import Field

from mtcore.contracts.errors import DataError
from mtcore.contracts.identity import HASHED_WHEN_SET
from mtcore.contracts.plugin import Pair, PluginConfig
from mtcore.contracts.stats import Stats
from mtcore.contracts.step import write_artifact_meta
from mtcore.data.archives import Member
from mtcore.exec.streams import CORRUPT, open_compressed
from mtcore.text.chars import BOM, INNER_BREAKS

Input = Path | Member  # a file on disk, or a member of an archive


class InputPolicy(PluginConfig):
    """What to do with each kind of bad input. ``error`` stops with file and line; ``drop``
    removes the whole pair (never one side alone); the others repair the line. Every rule that
    fires is counted in the step's stats as ``input.<rule>``."""

    invalid_utf8: Literal["error", "replace", "drop"] = Field(
        "error", description="bytes that are not UTF-8"
    )
    nul: Literal["error", "strip", "drop"] = Field("error", description="NUL bytes in a line")
    crlf: Literal["strip", "error"] = Field(
        "strip", description="a \\r before the \\n (Windows line ends)"
    )
    inner_breaks: Literal["space", "error", "drop"] = Field(
        "space", description="\\r, U+2028 and other line-break characters inside a line"
    )
    bom: Literal["strip", "error"] = Field(
        "strip", description="a byte-order mark at the start of a file"
    )
    empty: Literal["keep", "drop", "error"] = Field("keep", description="a pair with an empty side")
    max_line_bytes: int = Field(
        1 << 20, ge=16, le=1 << 30, description="longest line accepted, in bytes"
    )
    too_long: Literal["error", "drop"] = Field("error", description="a line over max_line_bytes")
    field_count: Literal["error", "drop"] = Field(
        "error",
        description="a line of a tab-separated (or separator-split) file with another number of "
        "fields than the file's first line (a tab inside a segment)",
        json_schema_extra=HASHED_WHEN_SET,
    )


STRICT = InputPolicy()


def open_binary(path: Path) -> contextlib.AbstractContextManager[IO[bytes]]:
    """A plain file, or the text of a ``.gz`` or ``.xz`` file."""
    return open_compressed(path)


def open_input(source: Input) -> contextlib.AbstractContextManager[IO[bytes]]:
    return source.open() if isinstance(source, Member) else open_binary(source)


class LineReader:
    """Yields ``(line_number, text | None)``; ``None`` means the policy dropped this line.

    ``path`` is a file (plain, ``.gz``, ``.xz``) or an archive member. With ``select``, only
    the lines whose raw bytes it accepts are decoded and yielded (the numbers stay file line
    numbers): how the ``.sgm`` reader takes the ``<seg>`` lines. A stream that ends early or
    is corrupt (a truncated download) is an error naming the file and the line reached."""

    def __init__(
        self,
        path: Input,
        policy: InputPolicy,
        stats: Stats,
        select: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.path = path
        self.policy = policy
        self.stats = stats
        self.select = select

    def __iter__(self) -> Iterator[tuple[int, str | None]]:
        limit = self.policy.max_line_bytes
        with open_input(self.path) as handle:
            number = 0
            while True:
                raw = self._readline(handle, limit + 2, number)
                if not raw:
                    return
                number += 1
                if self.select is not None and not self.select(raw[:256].lstrip()):
                    self._skip_rest(handle, raw, number)
                    continue
                # longer than the limit without its \n (a last line without one included)
                if len(raw) - raw.endswith(b"\n") > limit:
                    self._skip_rest(handle, raw, number)
                    yield number, too_long(self.path, number, self.policy, self.stats)
                    continue
                yield number, decode_line(raw, self.path, number, self.policy, self.stats)

    def _readline(self, handle: IO[bytes], size: int, number: int) -> bytes:
        try:
            return handle.readline(size)
        except CORRUPT as exc:
            raise DataError(
                f"{self.path}:{number + 1}: cannot be read after line {number}, the file is "
                f"truncated or corrupt ({type(exc).__name__}: {exc}); delete it and fetch it "
                "again"
            ) from exc

    def _skip_rest(self, handle: IO[bytes], raw: bytes, number: int) -> None:
        while not raw.endswith(b"\n"):
            raw = self._readline(handle, 1 << 20, number)
            if not raw:
                return


def too_long(path: object, number: int, policy: InputPolicy, stats: Stats) -> str | None:
    """A line over ``policy.max_line_bytes``: dropped (None) or an error, as the policy says."""
    return policy_rule(
        "too_long",
        path,
        number,
        f"line longer than {policy.max_line_bytes} bytes "
        "(raise input.max_line_bytes or set input.too_long: drop)",
        policy,
        stats,
    )


def decode_line(
    raw: bytes, path: object, number: int, policy: InputPolicy, stats: Stats
) -> str | None:
    """Line ``number`` of ``path`` (its bytes, ``\n`` included or not) through the policy: the
    text, None if the policy drops it, or a :class:`DataError` naming file and line. The one
    definition of what the rules do, shared by :class:`LineReader` and the sharded reader
    (:mod:`mtcore.data.ingest`)."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        if policy.crlf == "error":
            return policy_rule(
                "crlf", path, number, "CR LF line end (set input.crlf: strip)", policy, stats
            )
        raw = raw[:-1]
        stats.add("input.crlf_stripped")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if policy.invalid_utf8 == "replace":
            stats.add("input.invalid_utf8_replaced")
            text = raw.decode("utf-8", errors="replace")
        else:
            return policy_rule(
                "invalid_utf8",
                path,
                number,
                f"invalid UTF-8 at byte {exc.start} "
                f"({raw[exc.start : exc.start + 4]!r}); the file must be UTF-8 text "
                "(or set input.invalid_utf8: replace | drop)",
                policy,
                stats,
            )
    if number == 1 and text.startswith(BOM):
        if policy.bom == "error":
            return policy_rule(
                "bom",
                path,
                number,
                "byte-order mark at the start (set input.bom: strip)",
                policy,
                stats,
            )
        text = text[1:]
        stats.add("input.bom_stripped")
    if "\x00" in text:
        if policy.nul == "strip":
            stats.add("input.nul_stripped")
            text = text.replace("\x00", "")
        else:
            return policy_rule(
                "nul", path, number, "NUL byte in line (set input.nul: strip | drop)", policy, stats
            )
    if INNER_BREAKS.search(text):
        if policy.inner_breaks == "space":
            stats.add("input.inner_breaks_replaced")
            text = INNER_BREAKS.sub(" ", text)
        else:
            return policy_rule(
                "inner_breaks",
                path,
                number,
                "line-break character inside the line "
                "(\\r, U+2028, ...) (set input.inner_breaks: space | drop)",
                policy,
                stats,
            )
    return text


def policy_rule(
    rule: str, path: object, number: int, message: str, policy: InputPolicy, stats: Stats
) -> str | None:
    """Drops the line (returns None) or raises, as the policy for ``rule`` says."""
    if getattr(policy, rule) == "drop":
        stats.add(f"input.{rule}_dropped")
        return None
    raise DataError(f"{path}:{number}: {message}")


def empty_pair(
    pair: Sequence[str], path: object, number: int, policy: InputPolicy, stats: Stats
) -> bool:
    """Whether the policy drops ``pair`` for an empty (or all-space) side; raises for
    ``empty: error``."""
    if policy.empty == "keep" or all(t.strip() for t in pair):
        return False
    if policy.empty == "error":
        raise DataError(f"{path}:{number}: empty segment (set input.empty: keep | drop)")
    stats.add("input.empty_dropped")
    return True


def read_parallel(paths: Sequence[Input], policy: InputPolicy, stats: Stats) -> Iterator[Pair]:
    """Zip line-aligned files; a length mismatch is an error naming the shorter file."""
    readers = [LineReader(p, policy, stats) for p in paths]
    return zip_aligned(readers, paths, policy, stats, "lines")


def zip_aligned(
    readers: Sequence[Iterable[tuple[int, str | None]]],
    paths: Sequence[Input],
    policy: InputPolicy,
    stats: Stats,
    unit: str,
) -> Iterator[Pair]:
    """Pairs of the i-th item of each reader (a line, an ``.sgm`` segment); one reader ending
    before the others is an error naming both files."""
    iterators = [iter(r) for r in readers]
    count = 0
    while True:
        rows = [next(r, None) for r in iterators]
        ended = [row is None for row in rows]
        if all(ended):
            return
        if any(ended):
            short = paths[ended.index(True)]
            long_ = paths[ended.index(False)]
            number = next(row[0] for row in rows if row is not None)
            where = f"line {number}" if unit == "lines" else f"{long_}:{number}"
            raise DataError(
                f"{short} has {count} {unit} but {long_} has more ({where} has no "
                f"partner): the files of a parallel corpus must have equal {unit[:-1]} counts"
            )
        count += 1
        texts = [row[1] for row in rows if row is not None]
        number = rows[0][0] if rows[0] is not None else 0
        if any(t is None for t in texts):
            stats.add("input.pairs_dropped")
            continue
        pair = tuple(t for t in texts if t is not None)
        if empty_pair(pair, paths[0], number, policy, stats):
            continue
        yield pair


class Corpus:
    """A corpus directory written by mtcore: ``<name>.<lang>`` files and ``artifact.json``."""

    def __init__(self, path: Path, langs: tuple[str, ...], name: str = "corpus") -> None:
        self.path = path
        self.langs = tuple(langs)
        self.name = name

    @classmethod
    def open(cls, path: Path) -> Corpus:
        from mtcore.contracts.step import Artifact

        meta = Artifact.open(path).meta
        if meta.get("type") not in ("parallel", "monolingual"):
            raise DataError(f"{path} is not a corpus (artifact type {meta.get('type')!r})")
        return cls(path, tuple(meta["langs"]), meta.get("name", "corpus"))

    def file(self, lang: str) -> Path:
        return self.path / f"{self.name}.{lang}"

    def files(self) -> list[Path]:
        return [self.file(lang) for lang in self.langs]

    def __iter__(self) -> Iterator[Pair]:
        return read_parallel(self.files(), STRICT, Stats())

    def count(self) -> int:
        with open(self.files()[0], "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def write_corpus_meta(corpus: Corpus, lines: int, **extra: object) -> None:
    """The ``artifact.json`` of a corpus whose files are complete (written by
    :class:`CorpusWriter`, or linked into place by :mod:`mtcore.data.ingest`)."""
    write_artifact_meta(
        corpus.path,
        type="parallel" if len(corpus.langs) > 1 else "monolingual",
        langs=list(corpus.langs),
        name=corpus.name,
        lines=lines,
        **extra,
    )


class CorpusWriter:
    """Writes pairs to ``<dir>/<name>.<lang>``; ``close`` records the artifact metadata."""

    def __init__(self, path: Path, langs: Iterable[str], name: str = "corpus") -> None:
        self.corpus = Corpus(path, tuple(langs), name)
        path.mkdir(parents=True, exist_ok=True)
        self.handles = [
            open(f, "wb")  # noqa: SIM115 (closed in close())
            for f in self.corpus.files()
        ]
        self.lines = 0

    def write(self, pair: Pair) -> None:
        if len(pair) != len(self.handles):
            raise DataError(
                f"{self.corpus.path}: segment has {len(pair)} sides, corpus has {len(self.handles)}"
            )
        for handle, text in zip(self.handles, pair, strict=True):
            if "\n" in text:  # the readers guarantee this never happens; a plugin bug if it does
                raise DataError(
                    f"{self.corpus.path}: a plugin produced a segment containing a newline"
                )
            handle.write(text.encode("utf-8"))
            handle.write(b"\n")
        self.lines += 1

    def write_raw(self, sides: Sequence[bytes], lines: int) -> None:
        """Appends ``lines`` lines already encoded (``\n``-terminated) per side: the engine's
        fast path, which cuts kept lines out of the input bytes without decoding them."""
        if len(sides) != len(self.handles):
            raise DataError(
                f"{self.corpus.path}: block has {len(sides)} sides, corpus has {len(self.handles)}"
            )
        for handle, raw in zip(self.handles, sides, strict=True):
            handle.write(raw)
        self.lines += lines

    def write_all(self, pairs: Iterable[Pair]) -> None:
        for pair in pairs:
            self.write(pair)

    def close(self, **extra: object) -> Corpus:
        for handle in self.handles:
            handle.close()
        write_corpus_meta(self.corpus, self.lines, **extra)
        return self.corpus

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            for handle in self.handles:
                handle.close()


def batched(items: Iterable[Pair], size: int) -> Iterator[list[Pair]]:
    batch: list[Pair] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch

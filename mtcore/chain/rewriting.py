"""The processor chain over a corpus: every side rewritten line for line, one shard at a time
on the executor, resumable. The ``normalize`` step runs processor plugins with it; ``truecase``
and ``augment`` rewrite shards with their own models through :func:`rewrite_shard` and
:func:`rewrite_corpus`; what any rewriter returns is checked by :func:`checked_lines` (one line
of text per input line, no line break, no NUL), so a faulty plugin is named with the file and
line it broke.

Each side goes through the processors that apply to its language, in order; the output has
exactly one line per input line. The step's counters count, per processor and per language,
the lines it changed (``changed.<label>.<lang>``) and the lines that ended up empty
(``emptied.<lang>``).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mtcore.chain.components import ComponentSpec, built
from mtcore.contracts.errors import StepError
from mtcore.contracts.kinds import Processor
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import StepContext
from mtcore.data.corpus import Corpus, CorpusWriter
from mtcore.exec.shards import map_shards
from mtcore.text.block import BlockReader, RawBlock, lines_of_codes
from mtcore.text.kernels import BAD_CHARS, encode_utf8, first_fault, line_changes

PROCESSOR_KEYS = ("name", "langs")
"""Keys of a chain entry that belong to the step, not to the processor's settings."""

ShardOutput = tuple[tuple[bytes, ...], dict[str, int]]
"""What a worker sends back: the rewritten bytes of each side and its counters."""


def _langs(spec: ComponentSpec) -> tuple[str, ...] | None:
    langs = spec.get("langs")
    return None if langs is None else tuple(str(x) for x in langs)


def check_processor_langs(entries: Sequence[Any], field: str) -> list[tuple[str, str]]:
    """The step's own key of an entry: ``langs`` must be a non-empty list of language codes."""
    problems = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "langs" not in entry:
            continue
        langs = entry["langs"]
        if (
            not isinstance(langs, list)
            or not langs
            or not all(isinstance(x, str) and x.strip() for x in langs)
        ):
            problems.append(
                (f"{field}.{i}.langs", "Input should be a non-empty list of language codes")
            )
    return problems


def _processors(specs: tuple[ComponentSpec, ...]) -> list[Processor]:
    """The processors of ``specs``, built once per worker process."""
    return built(specs, lambda: [spec.build(load_registry()) for spec in specs])


def checked_lines(
    out: Any, given: Sequence[str], who: str, raw: RawBlock, side: int, lang: str
) -> list[str]:
    """``out`` if it is one line of text per input line with no line break, else a StepError
    naming ``who``, the corpus file and line."""
    if not isinstance(out, list):
        raise StepError(
            f"{who} returned a {type(out).__name__}, not a list of {len(given)} lines "
            f"({lang} side of {raw.paths[side]} from line {raw.first_line})"
        )
    if len(out) != len(given):
        raise StepError(
            f"{who} returned {len(out)} lines for {len(given)} ({lang} side of {raw.paths[side]} "
            f"from line {raw.first_line}): a processor must return one line per input line"
        )
    try:
        text = "\n".join(out)
    except TypeError:
        row = next(i for i, line in enumerate(out) if not isinstance(line, str))
        raise StepError(
            f"{who} returned {type(out[row]).__name__} instead of text for "
            f"{raw.paths[side]}:{raw.first_line + row}"
        ) from None
    # str.find of single characters runs at memory speed; a regex class would be ten times slower
    if text.count("\n") != max(len(out) - 1, 0) or any(ch in text for ch in BAD_CHARS):
        row = next(
            i for i, line in enumerate(out) if "\n" in line or any(ch in line for ch in BAD_CHARS)
        )
        raise StepError(
            f"{who} produced a line break or NUL in {raw.paths[side]}:{raw.first_line + row} "
            f"({lang}): {out[row][:80]!r}; a processor must keep one line per segment"
        )
    return out


def encode_lines(lines: Sequence[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def rewrite_shard(
    raw: RawBlock,
    langs: tuple[str, ...],
    rewrite: Callable[[list[str], int, str, Counter[str]], list[str]],
) -> ShardOutput:
    """Runs in a worker: decodes and checks one shard, rewrites each side with
    ``rewrite(lines, side, lang, counts)`` and encodes it back."""
    block = raw.decode(langs)
    counts: Counter[str] = Counter()
    sides = []
    for side, (column, lang) in enumerate(zip(block.columns, langs, strict=True)):
        lines = column.lines
        out = rewrite(lines, side, lang, counts)
        emptied = sum(map(operator.and_, map(bool, lines), map(operator.not_, out)))
        if emptied:
            counts[f"emptied.{lang}"] += emptied
        sides.append(encode_lines(out))
    return tuple(sides), dict(counts)


def checked_codes(
    out: Any, count: int, who: str, raw: RawBlock, side: int, lang: str
) -> np.ndarray:
    """``out`` if it is ``count`` lines of code points each ended by ``\\n``, with no other
    line break and no NUL; else a StepError naming ``who``, the corpus file and line."""
    if not isinstance(out, np.ndarray) or out.dtype != np.uint32 or out.ndim != 1:
        raise StepError(
            f"{who} returned {type(out).__name__} from process_codes, not a uint32 array "
            f"({lang} side of {raw.paths[side]} from line {raw.first_line})"
        )
    row = first_fault(out, count)
    if row == count:
        raise StepError(
            f"{who} returned {int(np.count_nonzero(out == 10))} lines for {count} ({lang} side "
            f"of {raw.paths[side]} from line {raw.first_line}): a processor must return one "
            "line per input line"
        )
    if row >= 0:
        raise StepError(
            f"{who} produced a line break, NUL or invalid code point in "
            f"{raw.paths[side]}:{raw.first_line + row} ({lang}); a processor must keep one "
            "line per segment"
        )
    return out


def process_shard(
    task: tuple[tuple[ComponentSpec, ...], tuple[str, ...], RawBlock],
) -> ShardOutput:
    """Runs in a worker. Each side stays code points while its processors have a compiled path
    (``process_codes``) and is encoded straight back to UTF-8; from the first that has not, it
    goes on as ``str`` lines."""
    specs, langs, raw = task
    chain = _processors(specs)
    block = raw.decode(langs)
    counts: Counter[str] = Counter()
    sides = []
    for side, (column, lang) in enumerate(zip(block.columns, langs, strict=True)):
        codes: np.ndarray | None = column.codes
        lines: list[str] | None = None
        for spec, plugin in zip(specs, chain, strict=True):
            only = _langs(spec)
            if only is not None and lang not in only:
                continue
            who = f"processor {spec.label!r}"
            changed = f"changed.{spec.label}.{lang}"
            out = plugin.process_codes(codes, lang) if codes is not None else None
            if out is not None and codes is not None:
                out = checked_codes(out, column.count, who, raw, side, lang)
                counts[changed] += line_changes(codes, out)
                codes = out
                continue
            if lines is None:  # code points until now
                if codes is None or codes is column.codes:
                    lines = column.lines
                else:
                    lines = lines_of_codes(codes)
            new = checked_lines(plugin.process(lines, lang), lines, who, raw, side, lang)
            counts[changed] += sum(map(operator.ne, lines, new))
            lines, codes = new, None
        if lines is None and codes is column.codes:  # no processor for this side
            sides.append(column.raw)
            continue
        if codes is not None:
            ends = np.flatnonzero(codes == 10)
            empty = np.diff(ends, prepend=-1) == 1
            sides.append(encode_utf8(codes).tobytes())
        else:
            empty = ~np.fromiter(map(bool, lines or ()), dtype=bool, count=column.count)
            sides.append(encode_lines(lines or []))
        emptied = int(np.count_nonzero(empty & (column.char_len > 0)))
        if emptied:
            counts[f"emptied.{lang}"] += emptied
    return tuple(sides), dict(counts)


def rewrite_corpus(
    ctx: StepContext,
    source: Corpus,
    task_fn: Callable[[Any], ShardOutput],
    payload: Any,
    shard_size: int,
    desc: str,
    out_langs: tuple[str, ...] | None = None,
) -> None:
    """Writes ``ctx.output("corpus")``: ``task_fn((payload, langs, shard))`` over every shard on
    the executor, in order, resuming from the shards a killed run already finished. The output
    names its columns ``out_langs`` (default: the source's; ``augment`` renames one)."""
    langs = source.langs
    with (
        CorpusWriter(ctx.output("corpus"), out_langs or langs, source.name) as writer,
        ctx.progress(source.count, desc) as bar,
    ):
        results = map_shards(
            ctx.executor,
            task_fn,
            BlockReader(source.files(), shard_size),
            lambda raw: (payload, langs, raw),
            ctx.scratch("shards"),
        )
        for raw, (sides, counts) in results:
            writer.write_raw(sides, raw.count)
            ctx.stats.merge(counts)
            bar.update(raw.count)
    ctx.stats.add("pairs_in", writer.lines)
    ctx.stats.add("pairs_out", writer.lines)

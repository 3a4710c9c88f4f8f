"""Reading a TSV file of parallel text, split into columns, through the input policy
(:class:`mtcore.data.corpus.InputPolicy`): a missing column or a bad line is an error naming file
and
line, or a counted repair or drop the user chose."""

from __future__ import annotations

from collections.abc import Iterator

from mtcore.contracts.errors import DataError
from mtcore.contracts.plugin import Pair
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import Input, InputPolicy, LineReader


def read_tsv(
    path: Input, columns: list[int], policy: InputPolicy, stats: Stats, separator: str = "\t"
) -> Iterator[Pair]:
    """Columns of a file whose fields are split by ``separator`` (a tab, or e.g. ``" ||| "`` for
    fast_align/Moses-style pair files). The first non-blank line sets the file's field count:
    too few for ``columns`` is an error; another line with a different count (a tab inside a
    segment shifts every column after it) is the ``field_count`` rule of the policy."""
    need = max(columns) + 1
    shown = "tab" if separator == "\t" else repr(separator)
    expected: tuple[int, int] | None = None  # (line number, field count) of the first line
    for number, text in LineReader(path, policy, stats):
        if text is None:
            stats.add("input.pairs_dropped")
            continue
        fields = text.split(separator)
        if not text.strip() and len(fields) < need and policy.empty != "error":
            if policy.empty == "drop":
                stats.add("input.empty_dropped")
                continue
            fields = [""] * need
        elif expected is None:
            expected = (number, len(fields))
            if len(fields) < need:
                raise DataError(
                    f"{path}:{number}: expected at least {need} {shown}-separated columns, "
                    f"found {len(fields)}"
                )
        elif len(fields) != expected[1]:
            if policy.field_count == "drop":
                stats.add("input.field_count_dropped")
                continue
            problem = (
                f"expected at least {need} {shown}-separated columns, found {len(fields)}"
                if len(fields) < need
                else f"{len(fields)} {shown}-separated fields (a {shown} inside a segment?)"
            )
            raise DataError(
                f"{path}:{number}: {problem}, but line {expected[0]} has {expected[1]}; fix the "
                "file or set input.field_count: drop"
            )
        pair = tuple(fields[c] for c in columns)
        if any(not t.strip() for t in pair):
            if policy.empty == "error":
                raise DataError(f"{path}:{number}: empty segment (set input.empty: keep | drop)")
            if policy.empty == "drop":
                stats.add("input.empty_dropped")
                continue
        yield pair

"""What the file-reading sources (``local``, ``url``) share: archive members, the corpus
layouts (one file per language, plain or ``.sgm``; a TSV file; a WMT XML test set), and the
checks of which settings go together."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from mtcore.api import HASHED_WHEN_SET, Pair, Stats
from mtcore.api.engine import (
    Input,
    InputPolicy,
    find_member,
    read_parallel,
    read_sgm,
    read_ted,
    read_tsv,
    read_wmt_xml,
)

Pattern = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
MemberLangCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]
Format = Literal["auto", "text", "sgm", "tags"]

# The fields both sources add for archives and test-set formats (hashed only when set).
MEMBER_FIELD: Any = Field(
    None,
    description="with archive: {lang: path or glob} of one member per language, or one path "
    "or glob of a TSV member (with columns) or WMT XML member (with langs); a glob must match "
    "exactly one member ('*' also crosses '/')",
    json_schema_extra=HASHED_WHEN_SET,
)
FORMAT_FIELD: Any = Field(
    "auto",
    description="one-file-per-language format: text (a segment per line), sgm (WMT <seg> "
    "lines) or tags (IWSLT/TED train.tags: talk metadata lines skipped); auto: sgm when every "
    "name ends in .sgm (or .sgm.gz/.sgm.xz), tags when every name starts with train.tags.",
    json_schema_extra=HASHED_WHEN_SET,
)
TRANSLATOR_FIELD: Any = Field(
    None,
    min_length=1,
    max_length=64,
    description="WMT XML: the translator attribute of the <ref> to read where a document "
    "has several",
    json_schema_extra=HASHED_WHEN_SET,
)

GOES_WITH = {
    "langs": "dir + prefix, xml, or archive with one WMT XML member",
    "columns": "tsv, or archive with one TSV member",
    "format": "files, dir + prefix, or archive with member: {lang: pattern}",
    "translator": "xml, or archive with one WMT XML member",
}


def companions(config: Any) -> set[str]:
    """The secondary settings given (not at their default)."""
    given = {k for k in ("langs", "columns", "translator") if getattr(config, k, None) is not None}
    if config.separator != "\t":
        given.add("separator")
    if config.format != "auto":
        given.add("format")
    return given


def check_companions(form: str, config: Any, allowed: set[str]) -> None:
    """Raise for a setting that the chosen ``form`` would silently ignore."""
    for key in sorted(companions(config) - allowed):
        if key == "separator":
            raise ValueError(
                "separator applies to a tsv file only (give tsv + columns, or archive + member "
                "+ columns)"
            )
        raise ValueError(f"{key} does not apply to {form} (it goes with {GOES_WITH[key]})")


def check_archive_form(config: Any) -> None:
    """``archive`` + ``member``: per-language members, or one TSV or WMT XML member."""
    member = config.member
    if member is None:
        raise ValueError("archive + member also needs member: {lang: pattern} or one pattern")
    if isinstance(member, dict):
        if not member:
            raise ValueError("member names no language")
        check_companions("archive + member: {lang: pattern}", config, {"format"})
    elif config.columns is not None:
        check_companions(
            "archive + member + columns (a TSV member)", config, {"columns", "separator"}
        )
    elif config.langs is not None:
        check_companions(
            "archive + member + langs (a WMT XML member)", config, {"langs", "translator"}
        )
    else:
        raise ValueError(
            f"one member ({member!r}) needs columns: {{lang: column}} (a TSV member) or "
            "langs: [..] (a WMT XML member); for one member per language give "
            "member: {lang: pattern}"
        )


def check_unique(config: Any) -> None:
    columns, langs = config.columns, config.langs
    if columns is not None and len(set(columns.values())) != len(columns):
        raise ValueError(f"columns reads one column for two languages: {columns}")
    if langs is not None and len(set(langs)) != len(langs):
        raise ValueError(f"langs lists a language twice: {langs}")


def layout(config: Any) -> str:
    """``tsv``, ``xml`` (a WMT XML test set) or ``lines`` (one file or member per language)."""
    if config.columns is not None:
        return "tsv"
    if getattr(config, "xml", None) is not None or isinstance(config.member, str):
        return "xml"
    return "lines"


def langs_of(config: Any) -> tuple[str, ...]:
    member = config.member if isinstance(config.member, dict) else None
    return tuple(config.files or config.columns or member or config.langs or ())


def archive_members(archive: Path, member: str | Mapping[str, str]) -> list[Input]:
    """The members ``member`` names, resolved (each must match exactly one file)."""
    if isinstance(member, str):
        return [find_member(archive, member, "member")]
    return [find_member(archive, pattern, f"member.{lang}") for lang, pattern in member.items()]


def text_format(fmt: str, inputs: Sequence[Input]) -> str:
    """``text``, ``sgm`` or ``tags``: ``fmt``, or for ``auto`` what every name says."""
    if fmt != "auto":
        return fmt
    names = [
        Path(item.name).name.lower().removesuffix(".gz").removesuffix(".xz") for item in inputs
    ]
    if all(name.endswith(".sgm") for name in names):
        return "sgm"
    if all(name.startswith("train.tags.") for name in names):
        return "tags"
    return "text"


def read_layout(
    config: Any, inputs: Sequence[Input], policy: InputPolicy, stats: Stats
) -> Iterator[Pair]:
    """Reads ``inputs`` (files or members, in column order) as ``config`` lays them out."""
    kind = layout(config)
    if kind == "tsv":
        columns = list(config.columns.values())
        return read_tsv(inputs[0], columns, policy, stats, config.separator)
    if kind == "xml":
        return read_wmt_xml(inputs[0], list(config.langs), config.translator, policy, stats)
    fmt = text_format(config.format, inputs)
    if fmt == "sgm":
        return read_sgm(inputs, policy, stats)
    if fmt == "tags":
        return read_ted(inputs, policy, stats)
    return read_parallel(inputs, policy, stats)

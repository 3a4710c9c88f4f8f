"""Corpus files on local disk: one file per language, a tab-separated file, a WMT test set
(``.sgm`` per language, or one XML file), or members of a tar or zip archive.

The ways to name the files (exactly one per source)::

    files: {en: data/train.en, ja: data/train.ja.gz}   # dict order is column order
    dir: data, prefix: train, langs: [en, ja]          # data/train.en, data/train.ja
    tsv: data/train.tsv, columns: {en: 0, ja: 1}       # 0-based tab-separated columns
    xml: wmttest2022.en-ja.xml, langs: [en, ja]        # WMT21+ XML (src en, ref ja)
    archive: kftt-data-1.0.tar.gz                      # members of a tar/zip archive:
      member: {en: "*/orig/kyoto-train.en", ja: "*/orig/kyoto-train.ja"}
    archive: en-ja.tar.gz, member: "*/en-ja.bicleaner05.txt", columns: {en: 3, ja: 4}

``separator`` (with ``tsv``) splits the fields on another string, e.g. ``" ||| "`` for the
``source ||| target`` files of fast_align, Moses and the Microtopia corpus. ``format: sgm``
(automatic for names ending in ``.sgm``) reads WMT ``<seg>`` files; see :mod:`mtcore.data.formats`
and :mod:`mtcore.data.archives`.

``obtain`` says how to get a file that no address serves (a registration-gated corpus: what to
download, from where, where to put it); it ends the error raised when a file is missing.

A path ending in ``.gz`` or ``.xz`` is decompressed. Relative paths are resolved against the
current directory when the source is read (and fingerprinted), not when the recipe is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from mtcore.api import (
    HASHED_WHEN_SET,
    NOT_IDENTITY,
    DataError,
    Pair,
    PluginConfig,
    Source,
    content_hash,
)
from mtcore.api.engine import Input
from mtcore_plugins.sources._layout import (
    FORMAT_FIELD,
    MEMBER_FIELD,
    TRANSLATOR_FIELD,
    Format,
    Pattern,
    archive_members,
    check_archive_form,
    check_companions,
    check_unique,
    langs_of,
    layout,
    read_layout,
    text_format,
)

# A language becomes a file suffix (corpus.<lang>): no dots, slashes or spaces.
LangCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
Column = Annotated[int, Field(ge=0, le=10_000)]


def resolve(path: str) -> Path:
    """``path`` made absolute against the current directory (``~`` expanded)."""
    return Path(path).expanduser().absolute()


def check_file(path: Path, what: str) -> Path:
    if not path.is_file():
        problem = "is not a regular file" if path.exists() else "does not exist"
        raise DataError(
            f"{path}: {what} {problem} (relative paths are resolved against the current "
            f"directory, {Path.cwd()})"
        )
    return path


def content_fingerprint(paths: list[Path]) -> str:
    """sha256 of each file's bytes, in column order: copying the data elsewhere, checking it
    out again or touching it keeps every cached step that read it (a fingerprint of path,
    size and mtime did not: a re-copied data directory re-ran whole recipes). Each hash is
    remembered by path, size, mtime and inode (:func:`mtcore.recipe.hashing.content_hash`), so an
    unchanged file is read once."""
    return json.dumps([content_hash(p) for p in paths])


class LocalSource(Source):
    """Reads corpus files or archive members through the input policy (monolingual: one lang)."""

    name = "local"

    class Config(PluginConfig):
        files: dict[LangCode, PathText] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="language -> path of a line-aligned plain, .gz, .xz or .sgm file; "
            "order = columns",
        )
        dir: PathText | None = Field(
            None, description="directory of <prefix>.<lang> files (with prefix and langs)"
        )
        prefix: str | None = Field(
            None,
            pattern=r"^[^/\\]+$",
            max_length=255,
            description="file name before .<lang> in dir (a .gz file is used if no plain one)",
        )
        langs: list[LangCode] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="languages in column order (with dir, xml or one WMT XML member)",
        )
        tsv: PathText | None = Field(
            None, description="path of a tab-separated plain or .gz file (with columns)"
        )
        columns: dict[LangCode, Column] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="language -> 0-based column of tsv or the TSV member; order = columns",
        )
        separator: str = Field(
            "\t", min_length=1, max_length=16, description="field separator of tsv (' ||| ', ...)"
        )
        xml: PathText | None = Field(
            None,
            description="path of a WMT XML test set (with langs: the src and ref languages)",
            json_schema_extra=HASHED_WHEN_SET,
        )
        archive: PathText | None = Field(
            None,
            description="path of a tar (.tar, .tar.gz/.tgz, .tar.xz) or zip archive (with member)",
            json_schema_extra=HASHED_WHEN_SET,
        )
        member: dict[LangCode, Pattern] | Pattern | None = MEMBER_FIELD
        format: Format = FORMAT_FIELD
        translator: str | None = TRANSLATOR_FIELD
        obtain: str | None = Field(
            None,
            min_length=1,
            max_length=2000,
            description="how to get a file that cannot be downloaded by address (what to "
            "download, from where, where to put it); appended to the error when a file is "
            "missing",
            json_schema_extra=NOT_IDENTITY,
        )

        @model_validator(mode="after")
        def _one_form(self) -> LocalSource.Config:
            forms = {
                "files": self.files is not None,
                "dir + prefix + langs": self.dir is not None or self.prefix is not None,
                "tsv + columns": self.tsv is not None,
                "xml + langs": self.xml is not None,
                "archive + member": self.archive is not None,
            }
            given = [name for name, on in forms.items() if on]
            if len(given) != 1:
                found = f"got {' and '.join(given)}" if given else "got none"
                raise ValueError(
                    "give exactly one of: files: {lang: path}; dir + prefix + langs; "
                    "tsv + columns: {lang: column}; xml + langs; archive + member "
                    f"({found})"
                )
            form = given[0]
            if self.member is not None and form != "archive + member":
                raise ValueError("member names files inside an archive: give archive too")
            if form == "archive + member":
                check_archive_form(self)
            else:
                needs = {"dir + prefix + langs": ["dir", "prefix", "langs"]}.get(form, [])
                needs += {"tsv + columns": ["columns"], "xml + langs": ["langs"]}.get(form, [])
                missing = [key for key in needs if getattr(self, key) is None]
                if missing:
                    raise ValueError(f"{form} also needs {' and '.join(missing)}")
                allowed = {
                    "files": {"format"},
                    "dir + prefix + langs": {"langs", "format"},
                    "tsv + columns": {"columns", "separator"},
                    "xml + langs": {"langs", "translator"},
                }[form]
                check_companions(form, self, allowed)
            check_unique(self)
            return self

    config: Config

    def langs(self) -> tuple[str, ...]:
        return langs_of(self.config)

    def paths(self) -> list[Path]:
        """The files to read, resolved now and checked to exist (one for tsv, xml, archive);
        a missing file's error ends with ``obtain``, where the recipe says how to get it."""
        try:
            return self._paths()
        except DataError as exc:
            if self.config.obtain is None:
                raise
            raise DataError(f"{exc}. To obtain it: {self.config.obtain}") from exc

    def _paths(self) -> list[Path]:
        cfg = self.config
        if cfg.files is not None:
            return [check_file(resolve(p), f"file for {lang!r}") for lang, p in cfg.files.items()]
        if cfg.tsv is not None:
            return [check_file(resolve(cfg.tsv), "tsv file")]
        if cfg.xml is not None:
            return [check_file(resolve(cfg.xml), "xml file")]
        if cfg.archive is not None:
            return [check_file(resolve(cfg.archive), "archive")]
        return [self._prefixed(lang) for lang in self.langs()]

    def _prefixed(self, lang: str) -> Path:
        plain = resolve(self.config.dir or ".") / f"{self.config.prefix}.{lang}"
        gzipped = plain.with_name(plain.name + ".gz")
        if not plain.exists() and gzipped.is_file():
            return gzipped
        return check_file(plain, f"file for {lang!r} (nor is there {gzipped.name})")

    def fingerprint(self) -> str:
        """The files' content hashes (read once per file version, see content_fingerprint)."""
        return content_fingerprint(self.paths())

    def line_files(self, stats: Any) -> list[Path] | None:
        """The files themselves when they are line-aligned text, one per language."""
        if layout(self.config) != "lines" or self.config.member is not None:
            return None
        paths = self.paths()
        return paths if text_format(self.config.format, paths) == "text" else None

    def read(self, policy: Any, stats: Any) -> Iterator[Pair]:
        paths = self.paths()
        member = self.config.member
        inputs: list[Input] = list(paths)
        if member is not None:
            inputs = archive_members(paths[0], member)
        yield from read_layout(self.config, inputs, policy, stats)

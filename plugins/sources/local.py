"""Line-aligned corpus files on local disk: one file per language, or one tab-separated file.

Three equivalent ways to name the files (exactly one per source)::

    files: {en: data/train.en, ja: data/train.ja.gz}   # dict order is column order
    dir: data, prefix: train, langs: [en, ja]          # data/train.en, data/train.ja
    tsv: data/train.tsv, columns: {en: 0, ja: 1}       # 0-based tab-separated columns

``separator`` (with ``tsv``) splits the fields on another string, e.g. ``" ||| "`` for the
``source ||| target`` files of fast_align, Moses and the Microtopia corpus.

A path ending in ``.gz`` is read through gzip. Relative paths are resolved against the current
directory when the source is read (and fingerprinted), not when the recipe is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from mtcore.corpus import read_parallel, read_tsv
from mtcore.errors import DataError
from mtcore.hashing import content_hash
from mtcore.plugin import Pair, PluginConfig, Source

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
    remembered by path, size, mtime and inode (:func:`mtcore.hashing.content_hash`), so an
    unchanged file is read once."""
    return json.dumps([content_hash(p) for p in paths])


class LocalSource(Source):
    """Reads line-aligned plain or gzip files through the input policy (monolingual: one lang)."""

    name = "local"

    class Config(PluginConfig):
        files: dict[LangCode, PathText] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="language -> path of a line-aligned plain or .gz file; order = columns",
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
            None, min_length=1, max_length=64, description="languages in column order (with dir)"
        )
        tsv: PathText | None = Field(
            None, description="path of a tab-separated plain or .gz file (with columns)"
        )
        columns: dict[LangCode, Column] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="language -> 0-based column of tsv; order = columns",
        )
        separator: str = Field(
            "\t", min_length=1, max_length=16, description="field separator of tsv (' ||| ', ...)"
        )

        @model_validator(mode="after")
        def _one_form(self) -> LocalSource.Config:
            forms = {
                "files": [self.files],
                "dir + prefix + langs": [self.dir, self.prefix, self.langs],
                "tsv + columns": [self.tsv, self.columns],
            }
            given = [name for name, values in forms.items() if any(v is not None for v in values)]
            if len(given) != 1:
                found = f"got {' and '.join(given)}" if given else "got none"
                raise ValueError(
                    "give exactly one of: files: {lang: path}; dir + prefix + langs; "
                    f"tsv + columns: {{lang: column}} ({found})"
                )
            missing = [
                n for n, v in zip(given[0].split(" + "), forms[given[0]], strict=True) if v is None
            ]
            if missing:
                raise ValueError(f"{given[0]} also needs {' and '.join(missing)}")
            if self.langs is not None and len(set(self.langs)) != len(self.langs):
                raise ValueError(f"langs lists a language twice: {self.langs}")
            if self.separator != "\t" and self.tsv is None:
                raise ValueError("separator applies to a tsv file only (give tsv + columns)")
            if self.columns is not None and len(set(self.columns.values())) != len(self.columns):
                raise ValueError(f"columns reads one column for two languages: {self.columns}")
            return self

    def langs(self) -> tuple[str, ...]:
        cfg = self.config
        return tuple(cfg.files or cfg.columns or cfg.langs or ())

    def paths(self) -> list[Path]:
        """The files to read, resolved now and checked to exist (one for tsv)."""
        cfg = self.config
        if cfg.files is not None:
            return [check_file(resolve(p), f"file for {lang!r}") for lang, p in cfg.files.items()]
        if cfg.tsv is not None:
            return [check_file(resolve(cfg.tsv), "tsv file")]
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

    def read(self, policy: Any, stats: Any) -> Iterator[Pair]:
        paths = self.paths()
        if self.config.columns is not None:
            columns = list(self.config.columns.values())
            yield from read_tsv(paths[0], columns, policy, stats, self.config.separator)
        else:
            yield from read_parallel(paths, policy, stats)

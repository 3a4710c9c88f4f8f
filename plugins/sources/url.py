"""Corpus files downloaded over HTTP(S) with urllib, cached, resumed and verified.

Each file is downloaded to ``<cache_dir>/<key>.part`` (key: the pinned sha256, else the sha256
of the URL); an interrupted download resumes from the partial file with ``Range: bytes=N-``
(a server that ignores Range and answers 200 is downloaded again from byte 0). The complete file
is checked against ``sha256`` and renamed into place atomically as ``<key>`` or ``<key>.gz`` (the
suffix is what makes :func:`mtcore.data.corpus.open_binary` decompress it). A file in the cache is
never downloaded again; it was verified before it was renamed there. Then the files are read
like the ``local`` source's: one file per language (plain or WMT ``.sgm``), a TSV file, a WMT
XML test set, or members of a downloaded tar or zip archive (``archive`` + ``member``), streamed
out of the cached archive without unpacking it (:mod:`mtcore.data.archives`). Changing ``member``
or ``columns`` reruns the read only; the archive stays in the cache.

Without ``sha256`` nothing guards against the server changing the file between two resumed
attempts; the actual hash is logged so it can be pinned.

With ``$MTCORE_MIRROR`` set, every address is fetched from that mirror instead
(:mod:`mtcore_plugins.common.hub.mirror`: an internal copy of the real files, pins final; the dress
rehearsal's replicas only with ``$MTCORE_MIRROR_REPLICAS=1``).
"""

from __future__ import annotations

import json
import logging
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
    cache_home,
)
from mtcore.api.engine import Input
from mtcore_plugins.common.hub.download import Downloader, FileSpec
from mtcore_plugins.common.hub.lockfile import active_lock
from mtcore_plugins.common.hub.mirror import (
    mirror_address,
    mirror_base,
    replica_hashes,
    replicas_allowed,
)
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

log = logging.getLogger("mtcore.sources.url")

LangCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]
Column = Annotated[int, Field(ge=0, le=10_000)]


def default_cache() -> Path:
    """``$MTCORE_CACHE/downloads``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)/mtcore/downloads."""
    return cache_home() / "downloads"


class UrlSource(Source):
    """Downloads corpus files (one per language, a tab-separated file, a WMT XML test set, or
    an archive and its members) and reads them through the input policy."""

    name = "url"

    class Config(PluginConfig):
        files: dict[LangCode, FileSpec] | None = Field(
            None, min_length=1, max_length=64, description="language -> file; order = columns"
        )
        tsv: FileSpec | None = Field(None, description="one tab-separated file (with columns)")
        columns: dict[LangCode, Column] | None = Field(
            None, min_length=1, max_length=64, description="language -> 0-based column of tsv"
        )
        separator: str = Field(
            "\t", min_length=1, max_length=16, description="field separator of tsv (' ||| ', ...)"
        )
        cache_dir: str | None = Field(
            None,
            min_length=1,
            max_length=4096,
            description="download cache directory; null: $MTCORE_CACHE/downloads, else "
            "~/.cache/mtcore/downloads",
            json_schema_extra=NOT_IDENTITY,
        )
        timeout: float = Field(
            60.0,
            gt=0,
            le=3600,
            description="seconds without data before an attempt fails",
            json_schema_extra=NOT_IDENTITY,
        )
        retries: int = Field(
            3,
            ge=0,
            le=20,
            description="further attempts after a failed one",
            json_schema_extra=NOT_IDENTITY,
        )
        backoff: float = Field(
            1.0,
            ge=0,
            le=60,
            description="seconds before the first retry, doubled for each next",
            json_schema_extra=NOT_IDENTITY,
        )

        langs: list[LangCode] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="languages of a WMT XML test set (with xml, or archive + one member)",
            json_schema_extra=HASHED_WHEN_SET,
        )
        xml: FileSpec | None = Field(
            None, description="a WMT XML test set (with langs)", json_schema_extra=HASHED_WHEN_SET
        )
        archive: FileSpec | None = Field(
            None,
            description="a tar (.tar, .tar.gz/.tgz, .tar.xz) or zip archive (with member)",
            json_schema_extra=HASHED_WHEN_SET,
        )
        member: dict[LangCode, Pattern] | Pattern | None = MEMBER_FIELD
        format: Format = FORMAT_FIELD
        translator: str | None = TRANSLATOR_FIELD

        @model_validator(mode="after")
        def _one_form(self) -> UrlSource.Config:
            forms = {
                "files": self.files is not None,
                "tsv + columns": self.tsv is not None,
                "xml + langs": self.xml is not None,
                "archive + member": self.archive is not None,
            }
            given = [name for name, on in forms.items() if on]
            if len(given) != 1:
                found = f"got {' and '.join(given)}" if given else "got none"
                raise ValueError(
                    "give exactly one of: files: {lang: {url, sha256}}; "
                    "tsv: {url, sha256} + columns: {lang: column}; xml: {url, sha256} + langs; "
                    f"archive: {{url, sha256}} + member ({found})"
                )
            form = given[0]
            if self.member is not None and form != "archive + member":
                raise ValueError("member names files inside an archive: give archive too")
            if form == "tsv + columns" and self.columns is None:
                raise ValueError("tsv and columns go together: give both")
            if form == "xml + langs" and self.langs is None:
                raise ValueError("xml + langs also needs langs")
            if form == "archive + member":
                check_archive_form(self)
            else:
                allowed = {
                    "files": {"format"},
                    "tsv + columns": {"columns", "separator"},
                    "xml + langs": {"langs", "translator"},
                }[form]
                check_companions(form, self, allowed)
            check_unique(self)
            return self

    config: Config

    def langs(self) -> tuple[str, ...]:
        return langs_of(self.config)

    def specs(self) -> list[FileSpec]:
        cfg = self.config
        if cfg.files:
            return list(cfg.files.values())
        spec = cfg.tsv or cfg.xml or cfg.archive
        assert spec is not None  # the validator asks for exactly one form
        return [spec]

    def fingerprint(self) -> str:
        """The pinned sha256 of each file, else its URL, and the mirror when one is set
        (nothing is downloaded)."""
        found: list[Any] = [spec.sha256 or spec.url for spec in self.specs()]
        base = mirror_base()
        if base is None:
            return json.dumps(found)
        mirror: dict[str, Any] = {
            "mirror": base,
            **({"replicas": True} if replicas_allowed() else {}),
        }
        return json.dumps([*found, mirror])

    def fetched_specs(self) -> list[FileSpec]:
        """``specs`` as downloaded: through ``$MTCORE_MIRROR`` when it is set, each checked
        against its pinned hash; a replica against the hash the mirror gives for it only when
        the user accepts replicas (``$MTCORE_MIRROR_REPLICAS=1``,
        :mod:`mtcore_plugins.common.hub.mirror`)."""
        base = mirror_base()
        if base is None:
            return self.specs()
        table = replica_hashes(base, self.config.timeout)
        return [
            spec.model_copy(
                update={
                    "url": mirror_address(spec.url, base),
                    "sha256": table.get(spec.url, spec.sha256),
                }
            )
            for spec in self.specs()
        ]

    def download(self, stats: Any) -> list[Path]:
        """The files, fetched into the cache (or found there), in ``specs`` order."""
        cfg = self.config
        cache = Path(cfg.cache_dir).expanduser().absolute() if cfg.cache_dir else default_cache()
        lock = None if mirror_base() and replicas_allowed() else active_lock()
        downloader = Downloader(cache, cfg.timeout, cfg.retries, cfg.backoff, stats, lock)
        return [downloader.fetch(spec) for spec in self.fetched_specs()]

    def relock(self, stats: Any) -> list[Path]:
        """``mtcore lock``: every unpinned file downloaded anew (its cached copy dropped) and
        recorded in the active lock file."""
        cfg = self.config
        cache = Path(cfg.cache_dir).expanduser().absolute() if cfg.cache_dir else default_cache()
        for spec in self.fetched_specs():
            if spec.sha256 is None:
                (cache / spec.cached_name()).unlink(missing_ok=True)
        return self.download(stats)

    def line_files(self, stats: Any) -> list[Path] | None:
        """The downloaded files themselves when they are line-aligned text, one per language."""
        if layout(self.config) != "lines" or self.config.member is not None:
            return None
        paths = self.download(stats)
        return paths if text_format(self.config.format, paths) == "text" else None

    def explain(self, exc: Exception) -> Exception:
        """The message names cache files: say which address each came from."""
        cfg = self.config
        cache = Path(cfg.cache_dir).expanduser().absolute() if cfg.cache_dir else default_cache()
        origin = [
            f"{path} is {spec.url}"
            for spec in self.fetched_specs()
            if str(path := cache / spec.cached_name()) in str(exc)
        ]
        return DataError(f"{exc} ({'; '.join(origin)})") if origin else exc

    def read(self, policy: Any, stats: Any) -> Iterator[Pair]:
        cfg = self.config
        paths = self.download(stats)
        try:
            inputs: list[Input] = list(paths)
            if cfg.member is not None:
                inputs = archive_members(paths[0], cfg.member)
            yield from read_layout(cfg, inputs, policy, stats)
        except DataError as exc:
            raise self.explain(exc) from exc

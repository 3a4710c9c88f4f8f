"""Corpus files downloaded over HTTP(S) with urllib, cached, resumed and verified.

Each file is downloaded to ``<cache_dir>/<key>.part`` (key: the pinned sha256, else the sha256
of the URL); an interrupted download resumes from the partial file with ``Range: bytes=N-``
(a server that ignores Range and answers 200 is downloaded again from byte 0). The complete file
is checked against ``sha256`` and renamed into place atomically as ``<key>`` or ``<key>.gz`` (the
suffix is what makes :func:`mtcore.corpus.open_binary` decompress it). A file in the cache is
never downloaded again; it was verified before it was renamed there. Then the files are read
like the ``local`` source's: one file per language (plain or WMT ``.sgm``), a TSV file, a WMT
XML test set, or members of a downloaded tar or zip archive (``archive`` + ``member``), streamed
out of the cached archive without unpacking it (:mod:`mtcore.archives`). Changing ``member``
or ``columns`` reruns the read only; the archive stays in the cache.

Without ``sha256`` nothing guards against the server changing the file between two resumed
attempts; the actual hash is logged so it can be pinned.

With ``$MTCORE_MIRROR`` set, every address is fetched from that mirror instead (:mod:`._mirror`:
an internal copy of the real files, or the dress rehearsal's replicas).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, StringConstraints, field_validator, model_validator

from mtcore.corpus import Input
from mtcore.errors import DataError
from mtcore.hashing import HASHED_WHEN_SET, cache_home, hash_file
from mtcore.plugin import NOT_IDENTITY, Pair, PluginConfig, Source
from mtcore.stats import Stats
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
from mtcore_plugins.sources._mirror import mirror_address, mirror_base, replica_hashes

log = logging.getLogger("mtcore.sources.url")

CHUNK = 1 << 16
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
USER_AGENT = "mtcore-url-source/0.1 (+urllib)"
LangCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]
Column = Annotated[int, Field(ge=0, le=10_000)]


class FileSpec(PluginConfig):
    url: str = Field(pattern=r"^https?://\S+$", max_length=8192, description="http(s) address")
    sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="expected sha256 of the file as downloaded (64 hex digits); null: not "
        "checked, the actual hash is logged so it can be pinned",
    )
    compression: Literal["auto", "none", "gz", "xz"] = Field(
        "auto",
        description="gz: gzip; xz: xz/lzma; none: as it is; auto: by the URL path's ending (.gz, "
        ".xz); an archive's own compression is detected from its bytes",
    )

    @field_validator("sha256")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value

    def key(self) -> str:
        return self.sha256 or hashlib.sha256(self.url.encode("utf-8")).hexdigest()

    def cached_name(self) -> str:
        """The key, with ``.gz`` or ``.xz`` when the file is compressed so (the suffix is what
        makes the readers decompress it)."""
        kind = self.compression
        if kind == "auto":
            path = urlsplit(self.url).path
            kind = "gz" if path.endswith(".gz") else "xz" if path.endswith(".xz") else "none"
        return self.key() + ("" if kind == "none" else f".{kind}")


class Incomplete(Exception):
    """One download attempt ended early; the next attempt resumes or restarts."""


def content_range(header: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of a ``Content-Range`` header; None where absent or ``*``."""
    found = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", header or "")
    if not found:
        return None, None
    start, total = found.groups()
    return (int(start) if start else None), (int(total) if total and total != "*" else None)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive lock, so two processes never append to one ``.part`` (no-op without fcntl)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; concurrent downloads are the user's risk
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Downloader:
    """Fetches files into ``cache``: resume from ``.part``, verify, rename into place."""

    def __init__(self, cache: Path, timeout: float, retries: int, backoff: float, stats: Stats):
        self.cache, self.timeout, self.retries, self.backoff = cache, timeout, retries, backoff
        self.stats = stats

    def fetch(self, spec: FileSpec) -> Path:
        final = self.cache / spec.cached_name()
        if not final.is_file():
            self.cache.mkdir(parents=True, exist_ok=True)
            part = self.cache / f"{spec.key()}.part"
            with locked(self.cache / f"{spec.key()}.lock"):
                if not final.is_file():  # else another process finished it while we waited
                    self._download(spec.url, part)
                    self._verify(spec, part)
                    os.replace(part, final)
                    return final
        self.stats.add("url.cache_hits")
        return final

    def _download(self, url: str, part: Path) -> None:
        import http.client

        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats.add("url.retries")
                time.sleep(min(self.backoff * 2 ** (attempt - 1), 60.0))
            try:
                self._attempt(url, part)
                self.stats.add("url.downloads")
                return
            except (OSError, http.client.HTTPException, Incomplete) as exc:
                error = str(exc) or type(exc).__name__
                log.warning(
                    "%s: attempt %d of %d failed: %s", url, attempt + 1, self.retries + 1, error
                )
        kept = f"; {part} is kept and the next run resumes from it" if part.exists() else ""
        raise DataError(f"{url}: download failed after {self.retries + 1} attempts: {error}{kept}")

    def _attempt(self, url: str, part: Path) -> None:
        import urllib.error
        import urllib.request

        offset = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={offset}-"} if offset else {})}
        try:
            response = urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=self.timeout
            )
        except urllib.error.HTTPError as exc:
            with exc:
                self._http_error(url, part, offset, exc)
            return
        with response:
            mode = "wb"
            if offset and response.status == 206:
                if content_range(response.headers.get("Content-Range"))[0] != offset:
                    part.unlink()
                    raise Incomplete(f"the server resumed at the wrong byte (asked for {offset})")
                mode = "ab"
                self.stats.add("url.resumed")
            elif offset:
                log.info("%s: the server ignored Range; downloading from byte 0 again", url)
                self.stats.add("url.range_ignored")
                offset = 0
            length = response.headers.get("Content-Length")
            received = 0
            with open(part, mode) as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            self.stats.add("url.bytes", received)
        # urllib returns b"" rather than raising when the connection closes early
        if length is not None and length.isdigit() and received < int(length):
            total = offset + int(length)
            raise Incomplete(f"connection closed after {offset + received} of {total} bytes")

    def _http_error(self, url: str, part: Path, offset: int, exc: Any) -> None:
        if exc.code == 416 and offset:  # nothing after byte offset: complete, or a stale .part
            if content_range(exc.headers.get("Content-Range"))[1] == offset:
                return
            part.unlink()
            raise Incomplete(f"HTTP 416 when resuming at byte {offset}; restarting from zero")
        if exc.code in RETRY_STATUS:
            raise Incomplete(f"HTTP {exc.code} {exc.reason}")
        raise DataError(f"{url}: HTTP {exc.code} {exc.reason}; check the url") from exc

    def _verify(self, spec: FileSpec, part: Path) -> None:
        actual = hash_file(part)
        if spec.sha256 is None:
            log.warning(
                "%s: no sha256 given; the file downloaded has sha256 %s (set sha256: %s to pin it)",
                spec.url,
                actual,
                actual,
            )
        elif actual != spec.sha256:
            part.unlink(missing_ok=True)
            raise DataError(
                f"{spec.url}: sha256 mismatch: expected {spec.sha256}, got {actual}; the "
                "download was deleted (fix the sha256 or the url)"
            )


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
        return json.dumps(found if base is None else [*found, {"mirror": base}])

    def fetched_specs(self) -> list[FileSpec]:
        """``specs`` as downloaded: through ``$MTCORE_MIRROR`` when it is set, a replica checked
        against the hash the mirror gives for it (:mod:`._mirror`)."""
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
        downloader = Downloader(cache, cfg.timeout, cfg.retries, cfg.backoff, stats)
        return [downloader.fetch(spec) for spec in self.fetched_specs()]

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

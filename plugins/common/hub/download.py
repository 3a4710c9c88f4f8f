"""One file the URL source downloads (:class:`FileSpec`), and the downloads into its cache:
resumed from a ``.part`` file, retried with backoff, verified against the expected sha256 and
renamed into place, one process at a time per file."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from mtcore.api import NOT_IDENTITY, DataError, PluginConfig, Stats, content_hash
from mtcore.api.engine import hash_file, open_lock
from mtcore_plugins.common.hub.lockfile import LockFile

log = logging.getLogger("mtcore.sources.url")

CHUNK = 1 << 16
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
USER_AGENT = "mtcore-url-source/0.1 (+urllib)"


class FileSpec(PluginConfig):
    url: str = Field(pattern=r"^https?://\S+$", max_length=8192, description="http(s) address")
    sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="expected sha256 of the file as downloaded (64 hex digits); null: not "
        "checked, the actual hash is logged so it can be pinned",
    )
    max_bytes: int = Field(
        64 << 30,
        ge=1,
        le=1 << 50,
        description="largest download accepted (bytes); a larger file is refused as it comes",
        json_schema_extra=NOT_IDENTITY,
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
    with open_lock(path) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def too_large(url: str, size: int, max_bytes: int) -> str:
    return (
        f"{url}: {size:,} bytes or more, past this file's max_bytes of {max_bytes:,}; the "
        "download was stopped (raise max_bytes for the file if it is that large)"
    )


class NoDowngrade(urllib.request.HTTPRedirectHandler):
    """Redirects as urllib follows them, except from https to anything else: the file would
    come over a connection anyone on the way can read and change (curl and pip refuse too)."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise DataError(
                f"{req.full_url}: redirected to {newurl}; a download follows http(s) redirects "
                "only (give the address the server means yourself)"
            )
        if urlsplit(req.full_url).scheme == "https" and urlsplit(newurl).scheme != "https":
            raise DataError(
                f"{req.full_url}: redirected to {newurl}, which is not https; an https "
                "download is never followed to a plain connection (give the https address "
                "the server means, or the http one yourself)"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class Downloader:
    """Fetches files into ``cache``: resume from ``.part``, verify, rename into place. An
    unpinned file is checked against the run's lock file (:mod:`.lockfile`) where it has an
    entry, and recorded there where it has none."""

    def __init__(
        self,
        cache: Path,
        timeout: float,
        retries: int,
        backoff: float,
        stats: Stats,
        lock: LockFile | None = None,
    ):
        self.cache, self.timeout, self.retries, self.backoff = cache, timeout, retries, backoff
        self.stats = stats
        self.lock = lock
        self.unsized: set[str] = set()  # urls whose body ended with the connection, no length

    def fetch(self, spec: FileSpec) -> Path:
        final = self.cache / spec.cached_name()
        locked_entry = self.lock.get(spec.url) if self.lock and spec.sha256 is None else None
        if not final.is_file():
            self.cache.mkdir(parents=True, exist_ok=True)
            part = self.cache / f"{spec.key()}.part"
            with locked(self.cache / f"{spec.key()}.lock"):
                if not final.is_file():  # else another process finished it while we waited
                    expected = spec.sha256 or (locked_entry or {}).get("sha256")
                    if expected is None and part.exists():  # nothing could tell a changed
                        part.unlink()  # file from the rest of the old one: no resume
                    self._download(spec.url, part, spec.max_bytes)
                    self._verify(spec, part, expected)
                    os.replace(part, final)
                    return final
        self.stats.add("url.cache_hits")
        if self.lock is not None and spec.sha256 is None and locked_entry is None:
            self.lock.record(spec.url, content_hash(final), final.stat().st_size)  # cached before
        if locked_entry is not None and content_hash(final) != locked_entry["sha256"]:
            where = self.lock.path if self.lock else "the lock file"
            raise DataError(
                f"{spec.url}: the cached file {final} is not the one {where} recorded (sha256 "
                f"{locked_entry['sha256']}); delete it to download it again, or run "
                "`mtcore lock` to record the current file"
            )
        return final

    def _download(self, url: str, part: Path, max_bytes: int = 64 << 30) -> None:
        import http.client

        error = ""
        self.unsized.discard(url)
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats.add("url.retries")
                time.sleep(min(self.backoff * 2 ** (attempt - 1), 60.0))
            try:
                self._attempt(url, part, max_bytes)
                self.stats.add("url.downloads")
                return
            except (OSError, http.client.HTTPException, Incomplete) as exc:
                error = str(exc) or type(exc).__name__
                log.warning(
                    "%s: attempt %d of %d failed: %s", url, attempt + 1, self.retries + 1, error
                )
        kept = f"; {part} is kept and the next run resumes from it" if part.exists() else ""
        raise DataError(f"{url}: download failed after {self.retries + 1} attempts: {error}{kept}")

    def _attempt(self, url: str, part: Path, max_bytes: int) -> None:
        offset = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={offset}-"} if offset else {})}
        try:
            response = urllib.request.build_opener(NoDowngrade).open(
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
            if length is not None and length.isdigit() and offset + int(length) > max_bytes:
                raise DataError(too_large(url, offset + int(length), max_bytes))
            received = 0
            with open(part, mode) as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    if offset + received > max_bytes:
                        out.close()
                        part.unlink()
                        raise DataError(too_large(url, offset + received, max_bytes))
                out.flush()
                os.fsync(out.fileno())
            self.stats.add("url.bytes", received)
        # urllib returns b"" rather than raising when the connection closes early
        if length is not None and length.isdigit() and received < int(length):
            total = offset + int(length)
            raise Incomplete(f"connection closed after {offset + received} of {total} bytes")
        chunked = "chunked" in (response.headers.get("Transfer-Encoding") or "").lower()
        if (length is None or not length.isdigit()) and not chunked:
            self.unsized.add(url)  # its end was the connection's: only a hash says it is whole

    def _http_error(self, url: str, part: Path, offset: int, exc: Any) -> None:
        if exc.code == 416 and offset:  # nothing after byte offset: complete, or a stale .part
            if content_range(exc.headers.get("Content-Range"))[1] == offset:
                return
            part.unlink()
            raise Incomplete(f"HTTP 416 when resuming at byte {offset}; restarting from zero")
        if exc.code in RETRY_STATUS:
            raise Incomplete(f"HTTP {exc.code} {exc.reason}")
        raise DataError(f"{url}: HTTP {exc.code} {exc.reason}; check the url") from exc

    def _verify(self, spec: FileSpec, part: Path, expected: str | None = None) -> None:
        actual = hash_file(part)
        expected = expected or spec.sha256
        if expected is None and spec.url in self.unsized:
            part.unlink(missing_ok=True)
            raise DataError(
                f"{spec.url}: the server sent neither a length nor chunks, so a connection that "
                "closed early would look complete, and no sha256 pins the file; the download "
                "was deleted (set sha256: for it)"
            )
        if expected is None:
            log.warning(
                "%s: no sha256 given; the file downloaded has sha256 %s (set sha256: %s to pin it)",
                spec.url,
                actual,
                actual,
            )
            if self.lock is not None:
                self.lock.record(spec.url, actual, part.stat().st_size)
        elif actual != expected:
            part.unlink(missing_ok=True)
            where = "" if spec.sha256 else f" (recorded in {self.lock.path if self.lock else ''})"
            raise DataError(
                f"{spec.url}: sha256 mismatch: expected {expected}{where}, got {actual}; the "
                "download was deleted (fix the sha256 or the url"
                + ("; or run `mtcore lock` if the file changed on purpose)" if where else ")")
            )

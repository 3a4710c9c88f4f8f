"""Downloads through a mirror: with ``$MTCORE_MIRROR`` set to a base address, every ``url``
source fetches ``<base>/<host><path>`` instead of ``<scheme>://<host><path>``.

A mirror of the real files (an institute's copy for a cluster without internet) keeps every
pinned sha256. A mirror that serves stand-ins (the test suite's dress rehearsal, miniature
replicas with the real names and layouts) says so in ``<base>/mirror.json``:
``{"replicas": {"<original address>": "<sha256 of the replica>"}}``; those files are checked
against the replica's hash instead, and are cached under it, so a replica never takes the place
of a real file in the download cache. The mirror is part of a source's fingerprint: a workdir
never reuses a corpus fetched from a mirror for a run without it, or the other way round.
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

from mtcore.errors import DataError

MIRROR_ENV = "MTCORE_MIRROR"
MANIFEST = "mirror.json"

_replicas: dict[str, dict[str, str]] = {}
"""The replica table of each mirror base, read once per process."""


def mirror_base() -> str | None:
    """The mirror's base address, or None when downloads go to the real hosts."""
    base = os.environ.get(MIRROR_ENV, "").strip()
    if not base:
        return None
    if not base.startswith(("http://", "https://")):
        raise DataError(f"{MIRROR_ENV}={base!r}: give an http(s) address, e.g. http://host:8000")
    return base.rstrip("/")


def mirror_address(url: str, base: str) -> str:
    """``url``'s copy on the mirror: host and path under the base, query kept."""
    parts = urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"{base}/{parts.netloc}{parts.path}{query}"


def replica_hashes(base: str, timeout: float) -> dict[str, str]:
    """Original address -> sha256 of the stand-in the mirror serves (empty for a true mirror,
    which has no ``mirror.json``)."""
    if base not in _replicas:
        import urllib.error
        import urllib.request

        address = f"{base}/{MANIFEST}"
        try:
            with urllib.request.urlopen(address, timeout=timeout) as response:
                table = json.loads(response.read().decode("utf-8")).get("replicas", {})
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise DataError(f"{address}: HTTP {exc.code} {exc.reason} ({MIRROR_ENV})") from exc
            table = {}
        except (OSError, ValueError, AttributeError) as exc:
            raise DataError(f"{address}: {exc} ({MIRROR_ENV} is set to {base})") from exc
        if not isinstance(table, dict):
            raise DataError(f"{address}: replicas must map addresses to sha256 hashes")
        _replicas[base] = {str(k): str(v).lower() for k, v in table.items()}
    return _replicas[base]

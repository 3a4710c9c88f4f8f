"""Downloads through a mirror: with ``$MTCORE_MIRROR`` set to a base address, every ``url``
source fetches ``<base>/<host><path>`` instead of ``<scheme>://<host><path>``.

A mirror is a copy of the real files (an institute's copy for a cluster without internet):
every pinned sha256 is final, checked file by file; nothing the mirror says changes it.

Stand-ins (the test suite's dress rehearsal: miniature replicas with the real names and layouts)
are the user's choice, never the mirror's: only with ``$MTCORE_MIRROR_REPLICAS=1`` set is the
mirror's ``<base>/mirror.json`` read, ``{"replicas": {"<original address>": "<sha256 of the
replica>"}}``, and those files checked against the replica's hash instead, and cached under
it, so a replica never takes the place of a real file in the download cache. The mirror (and
the replicas' choice) is part of a source's fingerprint: a workdir never reuses a corpus
fetched from a mirror for a run without it, or the other way round.
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import urlsplit

from mtcore.api import DataError

MIRROR_ENV = "MTCORE_MIRROR"
REPLICAS_ENV = "MTCORE_MIRROR_REPLICAS"
SHA256 = re.compile(r"[0-9a-f]{64}")
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


def replicas_allowed() -> bool:
    """Whether the user accepts the stand-ins a mirror lists (``MTCORE_MIRROR_REPLICAS=1``)."""
    value = os.environ.get(REPLICAS_ENV, "").strip().lower()
    if value in ("", "0", "no", "false"):
        return False
    if value in ("1", "yes", "true"):
        return True
    raise DataError(f"{REPLICAS_ENV}={value!r}: give 1 (accept a mirror's replicas) or 0")


def mirror_address(url: str, base: str) -> str:
    """``url``'s copy on the mirror: host and path under the base, query kept."""
    parts = urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"{base}/{parts.netloc}{parts.path}{query}"


def replica_hashes(base: str, timeout: float) -> dict[str, str]:
    """Original address -> sha256 of the stand-in the mirror serves: empty unless the user
    accepts replicas, and for a true mirror, which has no ``mirror.json``."""
    if not replicas_allowed():
        return {}
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
        hashes = {str(k): str(v).lower() for k, v in table.items()}
        for original, digest in hashes.items():
            if not SHA256.fullmatch(digest):  # a hash names a cache file: never a path
                raise DataError(
                    f"{address}: the replica of {original!r} has {digest[:80]!r} for its sha256; "
                    "give 64 hex digits"
                )
        _replicas[base] = hashes
    return _replicas[base]

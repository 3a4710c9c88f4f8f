"""The lock file of a recipe's downloads (``<recipe>.lock`` beside ``<recipe>.yaml``), as a
package manager keeps one: the sha256 and size of every file a ``url`` source downloads
without a pinned ``sha256``, recorded on its first download; later runs check the file
against it, in the cache or downloaded again, so a server that changes a file between two runs
is an error instead of another corpus. ``mtcore lock RECIPE`` downloads every unpinned file and
records it anew. A pinned sha256 in the recipe always wins; a mirror's replicas
(``MTCORE_MIRROR_REPLICAS``) are never recorded.

``mtcore run`` names the lock file in ``$MTCORE_LOCK_FILE`` for the run's steps (and its jobs
elsewhere); a run without it (the Python API) neither reads nor writes one."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mtcore.api import DataError
from mtcore.api.engine import LOCK_ENV, open_lock

FORMAT = 1


def active_lock() -> LockFile | None:
    """The run's lock file, when ``mtcore run`` named one."""
    where = os.environ.get(LOCK_ENV, "").strip()
    return LockFile(Path(where)) if where else None


class LockFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> dict[str, dict[str, Any]]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            files = data["files"]
            if data.get("format") != FORMAT or not isinstance(files, dict):
                raise ValueError(f"format {data.get('format')!r}")
            for url, entry in files.items():
                if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                        and isinstance(entry.get("size"), int)):  # fmt: skip
                    raise ValueError(f"entry {url!r} is not {{sha256, size}}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(
                f"{self.path}: not a lock file ({exc}); delete it, or run `mtcore lock` to "
                "write it anew"
            ) from None
        return files

    def get(self, url: str) -> dict[str, Any] | None:
        return self.entries().get(url)

    def record(self, url: str, sha256: str, size: int) -> None:
        """Adds (or replaces) ``url``'s entry; steps running side by side take turns."""
        guard = self.path.with_name(self.path.name + ".flock")
        with open_lock(guard) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            files = dict(self.entries())
            files[url] = {"sha256": sha256, "size": size}
            text = json.dumps({"format": FORMAT, "files": dict(sorted(files.items()))}, indent=2)
            # a fresh temporary name (a link planted at a fixed one would be followed)
            fd, temporary = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
            )
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text + "\n")
            os.replace(temporary, self.path)

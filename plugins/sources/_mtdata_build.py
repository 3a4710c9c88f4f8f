"""Builds the SQLite copy of mtdata's dataset index (run in its own process by
:mod:`._index`): ``python -m mtcore_plugins.sources._mtdata_build OUT.sqlite``.

mtdata assembles its index from the Python modules and resource tables inside its package (no
network); building it takes about 30 seconds, so mtcore does it once per mtdata version and
reads the table afterwards. mtdata's own cache of the index is a pickle, which this never
loads: the table written here holds text only. mtdata configures the root logger when it is
imported, which is why this runs apart from mtcore's process.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE entries (
    id TEXT PRIMARY KEY,   -- mtdata's dataset id: group-name-version-lang[-lang]
    grp TEXT, name TEXT, version TEXT,
    tags TEXT,             -- JSON: the id's BCP-47 language tags, in column order
    langs TEXT,            -- JSON: mtcore's language codes (ISO 639-1 where one exists)
    url TEXT,              -- JSON: one address, or one per language
    ext TEXT, in_ext TEXT,
    in_paths TEXT,         -- JSON: archive members (globs), or null
    cols TEXT              -- JSON: 0-based columns per language of a TSV, or null
);
CREATE INDEX entries_langs ON entries (langs);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
"""


def short_codes() -> dict[str, str]:
    """ISO 639-3 code -> ISO 639-1 code (``jpn`` -> ``ja``), from mtdata's own tables."""
    from mtdata.iso.iso639 import iso3_code
    from mtdata.iso.iso639_2 import data

    table = {}
    for line in data.splitlines():
        fields = line.split("|")
        if len(fields) >= 2 and len(fields[1]) == 2:
            code3 = iso3_code(fields[1], default=None)
            if code3:
                table[code3] = fields[1]
    return table


def rows(index: Any, short: dict[str, str]) -> list[tuple[Any, ...]]:
    out = []
    for entry in index.entries.values():
        did = entry.did
        tags = [str(tag) for tag in did.langs]
        langs = [short.get(tag.lang, tag.lang) for tag in did.langs]
        url = list(entry.url) if isinstance(entry.url, list | tuple) else entry.url
        out.append(
            (
                did.format(),
                did.group,
                did.name,
                did.version,
                json.dumps(tags),
                json.dumps(langs),
                json.dumps(url),
                entry.ext,
                entry.in_ext,
                json.dumps(list(entry.in_paths)) if entry.in_paths else None,
                json.dumps(list(entry.cols)) if entry.cols is not None else None,
            )
        )
    return out


def build(out: Path) -> int:
    import logging

    import mtdata
    from mtdata.index import Index

    logging.getLogger().setLevel(logging.WARNING)  # mtdata logs every module it loads
    # get_instance builds the index (and pickles it into $MTDATA, a temporary folder the
    # caller deletes: the pickle read back is the one just written here)
    index = Index.get_instance()
    found = rows(index, short_codes())
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    os.close(fd)
    try:
        db = sqlite3.connect(tmp)
        db.executescript(SCHEMA)
        db.executemany("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?)", found)
        db.execute("INSERT INTO meta VALUES ('mtdata', ?)", (mtdata.__version__,))
        db.commit()
        db.close()
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return len(found)


if __name__ == "__main__":
    count = build(Path(sys.argv[1]))
    print(f"{count} entries")

"""The dataset indexes that ship inside packages, read offline: mtdata's (WMT, OPUS, ParaCrawl,
Flores, NTREX and more, about 290,000 ids) and sacrebleu's (the WMT and IWSLT test sets).

An id resolves to what the ``url`` source needs: addresses, archive members, columns and the
language order (:class:`Resolved`). The ``mtdata``/``opus``/``flores``/``ntrex`` and
``sacrebleu`` sources (:mod:`.indexed`) download through the ``url`` source with that layout,
so resume, checksums, the lock file and mirrors work for them as for a raw address.

mtdata's index is built once per mtdata version into an SQLite table
(``$MTCORE_INDEX_DIR``, else ``$MTCORE_CACHE``/index; :mod:`._mtdata_build`, in its own process)
and read from there; sacrebleu's is the ``DATASETS`` table of the installed package.
"""

from __future__ import annotations

import difflib
import fcntl
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from mtcore.api import DataError, cache_home
from mtcore.api.engine import open_lock

log = logging.getLogger("mtcore.sources.index")

INDEX_ENV = "MTCORE_INDEX_DIR"
ARCHIVES = ("zip", "tar", "tar.gz", "tgz", "tar.xz")
UNSUPPORTED_COMPRESSION = (".bz2", ".zst", ".7z", ".lz4")


@dataclass(frozen=True)
class Resolved:
    """One corpus as an index describes it: the ``url`` source's settings and its languages
    (mtcore's codes, in column order)."""

    id: str
    index: str  # "mtdata 0.5.1", "sacrebleu 2.5.1"
    langs: tuple[str, ...]
    settings: dict[str, Any] = field(hash=False)
    md5: str | None = None  # the index's own checksum of the (one) download, where it has one

    def reordered(self, langs: tuple[str, ...]) -> Resolved:
        """The same corpus with its languages in ``langs`` order (a permutation)."""
        if langs == self.langs:
            return self
        if sorted(langs) != sorted(self.langs):
            raise DataError(
                f"{self.id}: langs {list(langs)} are not this corpus' languages "
                f"{list(self.langs)} (give them in the order you want, or leave langs out)"
            )
        settings = dict(self.settings)
        for key in ("files", "columns", "member"):
            value = settings.get(key)
            if isinstance(value, dict):
                settings[key] = {lang: value[lang] for lang in langs}
        if "langs" in settings:
            settings["langs"] = list(langs)
        return Resolved(self.id, self.index, langs, settings, self.md5)


def address(settings: dict[str, Any]) -> str:
    """The (first) address a resolved layout downloads."""
    if "files" in settings:
        return str(next(iter(settings["files"].values()))["url"])
    return str(next(settings[k]["url"] for k in ("tsv", "archive", "xml") if k in settings))


def index_dir() -> Path:
    where = os.environ.get(INDEX_ENV, "").strip()
    return Path(where).expanduser() if where else cache_home() / "index"


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise DataError(
            f"{name} is not installed: ids of this kind resolve through its index "
            f"(pip install {name}, or scripts/setup.sh)"
        ) from None


# --- mtdata --------------------------------------------------------------------------------


def mtdata_db() -> Path:
    """The SQLite copy of the installed mtdata's index, built on first use (about 30 s)."""
    version = package_version("mtdata")
    path = index_dir() / f"mtdata-{version}.sqlite"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_lock(path.with_name(path.name + ".flock")) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if path.is_file():  # another process built it while this one waited
            return path
        log.warning("building mtdata %s's index once into %s (about 30 s)", version, path)
        with tempfile.TemporaryDirectory() as home:
            done = subprocess.run(
                [sys.executable, "-m", "mtcore_plugins.sources._mtdata_build", str(path)],
                env={**os.environ, "MTDATA": home},
                capture_output=True,
                text=True,
                check=False,
            )
        if done.returncode != 0 or not path.is_file():
            raise DataError(
                f"building mtdata's index failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-2000:]}"
            )
    return path


class MtdataIndex:
    """Read-only queries on the SQLite copy of mtdata's index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        row = self.db.execute("SELECT value FROM meta WHERE key = 'mtdata'").fetchone()
        self.name = f"mtdata {row[0] if row else '?'}"

    def row(self, dataset_id: str) -> dict[str, Any] | None:
        cursor = self.db.execute("SELECT * FROM entries WHERE id = ?", (dataset_id,))
        found = cursor.fetchone()
        if found is None:
            return None
        names = [d[0] for d in cursor.description]
        record = dict(zip(names, found, strict=True))
        for key in ("tags", "langs", "url", "in_paths", "cols"):
            if record[key] is not None:
                record[key] = json.loads(record[key])
        return record

    def ids(self, langs: tuple[str, ...] | None = None) -> list[str]:
        """Every id, or those whose languages are ``langs`` in either order."""
        if langs is None:
            return [r[0] for r in self.db.execute("SELECT id FROM entries")]
        keys = {json.dumps(list(langs)), json.dumps(list(reversed(langs)))}
        marks = ",".join("?" * len(keys))
        query = f"SELECT id FROM entries WHERE langs IN ({marks}) ORDER BY id"
        return [r[0] for r in self.db.execute(query, sorted(keys))]

    def search(self, langs: tuple[str, ...], grep: str | None = None) -> list[dict[str, Any]]:
        found = [self.row(i) for i in self.ids(langs)]
        rows = [r for r in found if r is not None]
        if grep:
            word = grep.lower()
            rows = [r for r in rows if word in r["id"].lower() or word in json.dumps(r["url"])]
        return rows

    def closest(self, dataset_id: str, n: int = 5) -> list[str]:
        """Ids of the same languages close to ``dataset_id`` (any languages when it names
        none the index knows)."""
        parts = dataset_id.split("-")
        langs = tuple(p.split("_")[0] for p in parts[3:]) if len(parts) > 3 else ()
        pool = []
        if langs:
            short = [self._short(code) for code in langs]
            pool = self.ids(tuple(short))
        if not pool:
            pool = self.ids()
        return difflib.get_close_matches(dataset_id, pool, n=n, cutoff=0.4)

    def _short(self, code: str) -> str:
        row = self.db.execute(
            "SELECT tags, langs FROM entries WHERE tags LIKE ? LIMIT 1", (f'%"{code}"%',)
        ).fetchone()
        if row is None:
            return code
        tags, langs = json.loads(row[0]), json.loads(row[1])
        return langs[tags.index(code)] if code in tags else code

    def find(self, group: str, name: str, version: str | None, langs: tuple[str, ...]) -> Resolved:
        """The one entry of ``group``/``name`` (/``version``) for ``langs``; where several
        tags share mtcore's codes (``eng`` and ``eng_GB``), the one without a region."""
        keys = sorted({json.dumps(list(langs)), json.dumps(list(reversed(langs)))})
        query = "SELECT id, tags FROM entries WHERE grp = ? AND name = ? AND langs IN (?, ?)"
        args: list[Any] = [group, name, *keys]
        if version is not None:
            query += " AND version = ?"
            args.append(version)
        found = self.db.execute(query, args).fetchall()
        plain = [i for i, tags in found if not any("_" in t for t in json.loads(tags))]
        chosen = plain if len(plain) == 1 else [i for i, _ in found]
        what = f"{group}-{name}{f'-{version}' if version else ''} for {'-'.join(langs)}"
        if not chosen:
            versions = [
                r[0]
                for r in self.db.execute(
                    "SELECT DISTINCT version FROM entries WHERE grp = ? AND name = ? "
                    "AND langs IN (?, ?) ORDER BY version",
                    [group, name, *keys],
                )
            ]
            hint = (
                f"its versions for this pair: {', '.join(versions)}"
                if versions
                else (
                    f"the index has no {group} {name} for this pair (`mtcore datasets "
                    f"{'-'.join(langs)}` lists what it has)"
                )
            )
            raise DataError(f"{self.name}: no {what}; {hint}")
        if len(chosen) > 1:
            raise DataError(
                f"{self.name}: {what} is ambiguous: {', '.join(sorted(chosen))}; give one with "
                "source: mtdata, id: ..."
            )
        return self.resolve(chosen[0])

    def resolve(self, dataset_id: str) -> Resolved:
        record = self.row(dataset_id)
        if record is None:
            close = self.closest(dataset_id)
            hint = (
                f"closest ids: {', '.join(close)}" if close else "no id is close to it"
            ) + " (`mtcore datasets L1-L2` lists a pair's ids)"
            raise DataError(f"{dataset_id!r} is not an id of {self.name}'s index; {hint}")
        return Resolved(
            dataset_id, self.name, tuple(record["langs"]), mtdata_settings(record, self.name)
        )


@cache
def mtdata_index() -> MtdataIndex:
    return MtdataIndex(mtdata_db())


def mtdata_settings(record: dict[str, Any], index: str = "mtdata") -> dict[str, Any]:
    """The ``url`` source's settings for one mtdata entry (``record``: a row of the table)."""
    dataset_id, langs = record["id"], list(record["langs"])
    url, ext, in_ext = record["url"], record["ext"] or "", record["in_ext"]
    paths, cols = record["in_paths"], record["cols"]
    if len(set(langs)) != len(langs):
        raise DataError(
            f"{dataset_id}: both sides are {langs[0]} in mtcore's codes ({record['tags']}); "
            "such a corpus cannot be read by language"
        )

    def unsupported(what: str) -> DataError:
        return DataError(
            f"{dataset_id} ({index}) is {what}, which mtcore does not read (it reads text, "
            "sgm, TSV and WMT XML files, plain, .gz or .xz, alone or in tar/zip archives)"
        )

    addresses = url if isinstance(url, list) else [url]
    for address in addresses:
        if address.split("?")[0].endswith(UNSUPPORTED_COMPRESSION):
            raise unsupported(f"compressed as {Path(address.split('?')[0]).suffix}")
    columns = cols if cols is not None else list(range(len(langs)))
    if ext in ARCHIVES:
        if not paths:
            raise unsupported("an archive without members")
        if in_ext in ("txt", "sgm") and len(paths) == len(langs):
            return {
                "archive": {"url": url},
                "member": dict(zip(langs, paths, strict=True)),
                # txt: auto, so that IWSLT's train.tags files skip their talk metadata
                **({"format": "sgm"} if in_ext == "sgm" else {}),
            }
        if in_ext == "tsv" and len(paths) == 1:
            return {
                "archive": {"url": url},
                "member": paths[0],
                "columns": dict(zip(langs, columns, strict=True)),
            }
        if in_ext in ("wmt21xml", "wmt22xml", "wmt23xml", "xml") and len(paths) == 1:
            return {"archive": {"url": url}, "member": paths[0], "langs": langs}
        raise unsupported(f"{len(paths)} {in_ext} member(s) of a {ext} archive")
    if isinstance(url, list):
        if len(url) == len(langs) and in_ext in (None, "txt", "sgm"):
            return {"files": {lang: {"url": u} for lang, u in zip(langs, url, strict=True)}}
        raise unsupported(f"{len(url)} {in_ext or ext} files")
    if ext.startswith("tsv") or in_ext == "tsv" or cols is not None:
        return {"tsv": {"url": url}, "columns": dict(zip(langs, columns, strict=True))}
    if in_ext in (None, "txt") and len(langs) == 1 and not ext.startswith(("tmx", "csv", "xls")):
        return {"files": {langs[0]: {"url": url}}}
    raise unsupported(f"a {in_ext or ext} file")


# --- sacrebleu -----------------------------------------------------------------------------


def sacrebleu_resolve(test_set: str, langpair: str, ref: str | None = None) -> Resolved:
    """A sacrebleu test set (``wmt22``, ``wmt20/dev``, ...) for ``langpair`` (``en-ja``): the
    archive sacrebleu downloads and the members it reads, with the reference ``ref`` (a
    translator's letter for WMT XML sets, else its position among the references, 0 first)."""
    from sacrebleu.dataset import DATASETS
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset
    from sacrebleu.dataset.plain_text import PlainTextDataset
    from sacrebleu.dataset.wmt_xml import WMTXMLDataset

    name = f"sacrebleu {package_version('sacrebleu')}"
    dataset = DATASETS.get(test_set)
    if dataset is None:
        close = difflib.get_close_matches(test_set, list(DATASETS), n=5, cutoff=0.5)
        hint = f"closest: {', '.join(close)}" if close else f"valid: {', '.join(DATASETS)}"
        raise DataError(f"{test_set!r} is not a test set of {name}; {hint}")
    pairs = dataset.langpairs
    if langpair not in pairs:
        raise DataError(
            f"{test_set} ({name}) has no {langpair}; its pairs: {', '.join(sorted(pairs))}"
        )
    ident = f"{test_set}:{langpair}"
    src, tgt = langpair.split("-")
    urls = list(dataset.data or [])
    if len(urls) != 1:
        raise DataError(f"{ident} ({name}) is spread over {len(urls)} downloads; give it as url")
    archive = {"url": urls[0]}
    md5 = dataset.md5[0] if dataset.md5 else None
    meta = pairs[langpair]
    if isinstance(dataset, WMTXMLDataset):
        path = meta["path"] if isinstance(meta, dict) else meta[0]
        settings: dict[str, Any] = {"archive": archive, "member": path, "langs": [src, tgt]}
        refs = meta.get("refs") if isinstance(meta, dict) else None
        chosen = ref if ref is not None else (refs[0] if refs else None)
        if chosen:
            settings["translator"] = chosen
        return Resolved(ident, name, (src, tgt), settings, md5)
    if isinstance(dataset, FakeSGMLDataset | PlainTextDataset) and isinstance(meta, list):
        refs = meta[1:]
        index = int(ref) if ref is not None and ref.isdigit() else 0
        if (ref is not None and not ref.isdigit()) or index >= len(refs):
            raise DataError(
                f"{ident} ({name}): ref {ref!r}: give the position of one of its {len(refs)} "
                "references (0 first)"
            )
        members = {src: meta[0], tgt: refs[index]}
        fmt = "sgm" if isinstance(dataset, FakeSGMLDataset) else "text"
        settings = {"archive": archive, "member": members, "format": fmt}
        return Resolved(ident, name, (src, tgt), settings, md5)
    raise DataError(
        f"{ident} ({name}) is a {type(dataset).__name__}, which mtcore does not read by id; "
        "give it as url"
    )


def sacrebleu_sets(langs: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """(test set, langpair, number of references) of every sacrebleu test set for ``langs``
    in either direction."""
    from sacrebleu.dataset import DATASETS

    wanted = {"-".join(langs), "-".join(reversed(langs))}
    found = []
    for name, dataset in DATASETS.items():
        for pair, meta in dataset.langpairs.items():
            if pair in wanted:
                if isinstance(meta, dict):
                    refs = len(meta.get("refs") or [None])
                elif isinstance(meta, list):
                    refs = max(1, len(meta) - 1)
                else:
                    refs = 1
                found.append((name, pair, refs))
    return found

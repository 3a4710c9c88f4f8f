"""Corpora named by id: ``mtdata`` (any id of mtdata's index), its families ``opus``,
``flores`` and ``ntrex`` by their parts, and ``sacrebleu`` test sets. A data entry spells them
``{source: mtdata, id: Statmt-news_commentary-16-eng-jpn}`` or, shorter,
``{mtdata: Statmt-news_commentary-16-eng-jpn}`` (``{sacrebleu: {test_set: wmt22, langpair:
en-ja}}``; the recipe loader turns a key that names a source into ``source:``).

The id resolves offline through the index inside the installed package (:mod:`._index`) to
addresses, archive members, columns and the language order; the corpus is then downloaded and
read by the ``url`` source with exactly that layout (resume, checksums, the recipe's lock file,
``$MTCORE_MIRROR``). The resolved layout and the index's version are part of the fingerprint:
an index that changes a member or a column re-fetches the corpus. An unknown id is an error at
recipe load that lists the closest ids of the same pair.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, StringConstraints, model_validator

from mtcore.api import DataError, Pair, PluginConfig, Source
from mtcore.api.engine import CatalogEntry
from mtcore_plugins.common.hub.mirror import mirror_base, replicas_allowed
from mtcore_plugins.sources._index import (
    Resolved,
    address,
    mtdata_index,
    mtdata_settings,
    sacrebleu_resolve,
    sacrebleu_sets,
)
from mtcore_plugins.sources.url import LangCode, UrlSource

_URL = UrlSource.Config.model_fields
DatasetId = Annotated[str, StringConstraints(pattern=r"^[^\s/]{1,200}$")]
Word = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._+-]{1,100}$")]


class IndexedConfig(PluginConfig):
    """What every id-named source shares: the download settings of the ``url`` source."""

    cache_dir: str | None = _URL["cache_dir"]
    timeout: float = _URL["timeout"]
    retries: int = _URL["retries"]
    backoff: float = _URL["backoff"]

    def resolve(self) -> Resolved:
        raise NotImplementedError

    @model_validator(mode="after")
    def _resolves(self) -> IndexedConfig:
        try:
            self.resolve()
        except DataError as exc:
            raise ValueError(str(exc)) from None
        return self


def _ordered(found: Resolved, langs: list[str] | None) -> Resolved:
    return found.reordered(tuple(langs)) if langs else found


IndexedT = TypeVar("IndexedT", bound=IndexedConfig)


class IndexedSource(Source[IndexedT]):
    """Reads the corpus an index names through the ``url`` source."""

    @cached_property
    def resolved(self) -> Resolved:
        return self.config.resolve()

    @cached_property
    def url(self) -> UrlSource:
        cfg = self.config
        settings = {
            **self.resolved.settings,
            **{k: getattr(cfg, k) for k in ("cache_dir", "timeout", "retries", "backoff")},
        }
        try:
            return UrlSource(UrlSource.Config.model_validate(settings))
        except ValueError as exc:  # the index holds a layout the url source refuses
            raise DataError(f"{self.resolved.id} ({self.resolved.index}): {exc}") from None

    def langs(self) -> tuple[str, ...]:
        return self.resolved.langs

    def dataset(self) -> str | None:
        return f"{self.name}:{self.resolved.id}"

    def fingerprint(self) -> str:
        found = self.resolved
        # the languages' order is the columns' order: the settings keep it (never sort them)
        return json.dumps(
            [
                found.index,
                found.id,
                list(found.langs),
                found.settings,
                json.loads(self.url.fingerprint()),
            ]
        )

    def download(self, stats: Any) -> list[Path]:
        return self._verified(self.url.download(stats))

    def _verified(self, paths: list[Path]) -> list[Path]:
        """``paths`` checked against the index's own checksum where it has one (sacrebleu pins
        each archive's md5): a file that passed the lock file but not the index is an error
        and leaves the cache. A mirror's replicas (the rehearsal, the user's choice) are
        checked against the mirror's hashes instead."""
        expected = self.resolved.md5
        if expected and len(paths) == 1 and not (mirror_base() and replicas_allowed()):
            found = md5_file(paths[0])
            if found != expected.lower():
                paths[0].unlink(missing_ok=True)
                where = address(self.resolved.settings)
                raise DataError(
                    f"{self.resolved.id}: the file downloaded from {where} has md5 {found}, not "
                    f"the {expected} {self.resolved.index} pins for it (deleted from the cache: "
                    "a changed or damaged file)"
                )
        return paths

    def relock(self, stats: Any) -> list[Path]:
        return self.url.relock(stats)

    def line_files(self, stats: Any) -> list[Path] | None:
        files = self.url.line_files(stats)
        return None if files is None else self._verified(files)

    def explain(self, exc: Exception) -> Exception:
        return self.url.explain(exc)

    def read(self, policy: Any, stats: Any) -> Iterator[Pair]:
        self.download(stats)  # checked against the index first; the url source finds it cached
        return self.url.read(policy, stats)


def md5_file(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class MtdataConfig(IndexedConfig):
    id: DatasetId = Field(
        description="an id of mtdata's index (`mtcore datasets L1-L2` lists them), e.g. "
        "Statmt-news_commentary-16-eng-jpn"
    )
    langs: list[LangCode] | None = Field(
        None,
        min_length=1,
        max_length=2,
        description="the languages in the order wanted (mtcore's codes, e.g. [en, ja]); null: "
        "the id's order",
    )

    def resolve(self) -> Resolved:
        return _ordered(mtdata_index().resolve(self.id), self.langs)


class MtdataSource(IndexedSource[MtdataConfig]):
    """Any corpus of mtdata's index, by its id."""

    name = "mtdata"

    @classmethod
    def catalogue(cls, langs: tuple[str, ...], grep: str | None = None) -> list[CatalogEntry]:
        """The readable entries of mtdata's index for ``langs`` (layouts mtcore does not read,
        TMX and Hugging Face datasets, are left out)."""
        index = mtdata_index()
        found = []
        for record in index.search(langs, grep):
            try:
                settings = mtdata_settings(record, index.name)
            except DataError:
                continue
            entry = {"mtdata": record["id"]}
            order = tuple(record["langs"])
            found.append(CatalogEntry(cls.name, record["id"], order, entry, address(settings)))
        return found


Pair2 = Annotated[list[LangCode], Field(min_length=2, max_length=2)]


class OpusConfig(IndexedConfig):
    corpus: Word = Field(description="OPUS corpus name, e.g. JParaCrawl, OpenSubtitles")
    version: Word = Field(description="OPUS release, e.g. v3.0 (as OPUS and mtdata spell it)")
    langs: Pair2 = Field(description="the two languages in the order wanted, e.g. [en, ja]")

    def resolve(self) -> Resolved:
        found = mtdata_index().find("OPUS", self.corpus.lower(), self.version, tuple(self.langs))
        return found.reordered(tuple(self.langs))


class OpusSource(IndexedSource[OpusConfig]):
    """An OPUS corpus (Moses files of opus.nlpl.eu), by corpus, release and pair."""

    name = "opus"


class FloresConfig(IndexedConfig):
    split: Literal["dev", "devtest"] = Field(description="FLORES-200 split")
    langs: Pair2 = Field(description="the two languages in the order wanted, e.g. [en, ja]")

    def resolve(self) -> Resolved:
        found = mtdata_index().find("Flores", f"flores200_{self.split}", None, tuple(self.langs))
        return found.reordered(tuple(self.langs))


class FloresSource(IndexedSource[FloresConfig]):
    """FLORES-200 (dev 997 / devtest 1,012 sentences, the same in every language)."""

    name = "flores"


class NtrexConfig(IndexedConfig):
    langs: Pair2 = Field(description="the two languages in the order wanted, e.g. [en, ja]")

    def resolve(self) -> Resolved:
        found = mtdata_index().find("Microsoft", "ntrex", None, tuple(self.langs))
        return found.reordered(tuple(self.langs))


class NtrexSource(IndexedSource[NtrexConfig]):
    """NTREX-128 (newstest2019's 1,997 English sentences translated into 128 languages)."""

    name = "ntrex"


class SacrebleuConfig(IndexedConfig):
    test_set: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]{1,100}$")] = Field(
        description="a sacrebleu test set: wmt22, wmt20/dev, iwslt17, ... (sacrebleu --list)"
    )
    langpair: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_]{2,16}-[A-Za-z_]{2,16}$")] = (
        Field(description="source-target, e.g. en-ja")
    )
    ref: Word | None = Field(
        None,
        description="which reference: the translator of a WMT XML set (A, B, ...), else its "
        "position (0 first); null: sacrebleu's default",
    )

    def resolve(self) -> Resolved:
        return sacrebleu_resolve(self.test_set, self.langpair, self.ref)


class SacrebleuSource(IndexedSource[SacrebleuConfig]):
    """A WMT/IWSLT test set as sacrebleu defines it (archive, member, reference)."""

    name = "sacrebleu"

    @classmethod
    def catalogue(cls, langs: tuple[str, ...], grep: str | None = None) -> list[CatalogEntry]:
        if len(langs) != 2:
            return []
        found = []
        for test_set, pair, refs in sacrebleu_sets(langs):
            try:
                resolved = sacrebleu_resolve(test_set, pair)
            except DataError:
                continue
            where = address(resolved.settings)
            if grep and grep.lower() not in f"{test_set} {where}".lower():
                continue
            entry = {"sacrebleu": {"test_set": test_set, "langpair": pair}}
            size = f"{refs} references" if refs > 1 else "1 reference"
            ident = f"{test_set}:{pair}"
            found.append(CatalogEntry(cls.name, ident, resolved.langs, entry, where, size))
        return found

"""Parallel corpus from the machine's compiled gettext catalogs (``<locale>/LC_MESSAGES/*.mo``).

The offline default corpus, built the way OPUS built its GNOME, KDE and Ubuntu corpora: each
catalog pairs an English ``msgid`` with its translation. The ``.mo`` files are parsed here with
``struct`` (GNU format, both byte orders): :mod:`gettext` offers lookups only, neither iteration
in catalog order nor the raw plural forms.

Plural entries (``msgid`` + ``msgid_plural``, several ``msgstr`` forms) give up to two pairs: the
singular pair (msgid, the form the catalog's own ``Plural-Forms`` picks for n=1) and, with
``plurals: true``, the plural pair (msgid_plural, the form picked for n=5). Both sides of each pair
then render the same message for the same n; n=5 falls in the general plural category of English
and in the 'many'/'other' category of the Slavic languages. A catalog without a usable
``Plural-Forms`` falls back to the first form (singular) and the last form (plural).
"""

from __future__ import annotations

import codecs
import contextlib
import gettext
import json
import logging
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from mtcore.api import DataError, Pair, PluginConfig, Source, Stats

log = logging.getLogger("mtcore.sources.gettext")

MAGIC_LE = b"\xde\x12\x04\x95"  # 0x950412de written little-endian
MAGIC_BE = b"\x95\x04\x12\xde"
ENGLISH = "en"
DEFAULT_LOCALES = {"zh": "zh_CN"}
SINGULAR_N, PLURAL_N = 1, 5

LangCode = Annotated[str, StringConstraints(pattern=r"^[a-z]{2,3}$")]
LocaleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{2,3}(?:[_@.][A-Za-z0-9_@.-]+)?$")]
DomainName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+@-]*$", max_length=255)
]
Key = tuple[str | None, str, int]
"""(context, msgid, 0 for the singular pair / 1 for the plural pair): what pivoting matches on."""


class BadCatalog(Exception):
    """A file that is not a well-formed .mo catalog (counted and skipped, never fatal)."""


def parse_mo(data: bytes) -> list[tuple[bytes, bytes]]:
    """Raw (msgid, msgstr) byte strings in catalog order, header entry included."""
    if data[:4] == MAGIC_LE:
        order = "<"
    elif data[:4] == MAGIC_BE:
        order = ">"
    else:
        raise BadCatalog(f"magic number {data[:4].hex()} is not 950412de in either byte order")
    try:
        revision, count, ids_at, strs_at = struct.unpack_from(order + "4I", data, 4)
        if revision >> 16 not in (0, 1):
            raise BadCatalog(f"unsupported major revision {revision >> 16} (0 or 1 are known)")
        entries = []
        for i in range(count):
            id_len, id_at = struct.unpack_from(order + "2I", data, ids_at + 8 * i)
            str_len, str_at = struct.unpack_from(order + "2I", data, strs_at + 8 * i)
            if id_at + id_len > len(data) or str_at + str_len > len(data):
                raise BadCatalog(f"entry {i} points past the end of the file")
            entries.append((data[id_at : id_at + id_len], data[str_at : str_at + str_len]))
    except struct.error as exc:
        raise BadCatalog(f"truncated tables ({exc})") from exc
    return entries


def header_settings(header: bytes) -> tuple[str, Any]:
    """(charset, plural function or None) from the catalog header (msgstr of the empty msgid)."""
    text = header.decode("ascii", errors="replace")
    charset = "utf-8"
    found = re.search(r"charset=\s*([^\s;]+)", text, re.IGNORECASE)
    if found:
        # "CHARSET" in an unfilled template, or a codec Python lacks: keep UTF-8
        with contextlib.suppress(LookupError):
            charset = codecs.lookup(found.group(1)).name
    plural = None
    found = re.search(r"^Plural-Forms:.*?plural\s*=\s*([^;\n]+)", text, re.IGNORECASE | re.M)
    if found:
        try:
            plural = gettext.c2py(found.group(1).strip())
        except (ValueError, SyntaxError, RecursionError):
            plural = None
    return charset, plural


def form_index(plural: Any, n: int, forms: int, fallback: int) -> int:
    if plural is not None:
        try:
            index = int(plural(n))
        except (TypeError, ValueError, ZeroDivisionError, RecursionError):
            index = fallback
    else:
        index = fallback
    return min(max(index, 0), forms - 1)


def catalog_units(path: Path, stats: Stats, plurals: bool) -> Iterator[tuple[Key, str, str]]:
    """(key, english, translation) of one catalog, in catalog order; bad entries are counted."""
    try:
        entries = parse_mo(path.read_bytes())
    except BadCatalog as exc:
        log.warning("%s: not a valid .mo catalog, skipped: %s", path, exc)
        stats.add("gettext.bad_catalogs")
        return
    stats.add("gettext.catalogs")
    header = next((msgstr for msgid, msgstr in entries if msgid == b""), b"")
    charset, plural = header_settings(header)
    for raw_id, raw_str in entries:
        raw_ctx = None
        if b"\x04" in raw_id:  # msgctxt EOT msgid: the context only disambiguates, never output
            raw_ctx, raw_id = raw_id.split(b"\x04", 1)
        if not raw_id:
            continue  # the header, or a degenerate entry with an empty msgid
        try:
            ids = raw_id.decode(charset).split("\x00")
            forms = raw_str.decode(charset).split("\x00")
            ctx = raw_ctx.decode(charset) if raw_ctx is not None else None
        except UnicodeDecodeError:
            stats.add("gettext.undecodable")
            continue
        if len(ids) == 1:
            chosen = [(ids[0], forms[0], 0)]
        else:
            chosen = [(ids[0], forms[form_index(plural, SINGULAR_N, len(forms), 0)], 0)]
            if plurals:
                last = len(forms) - 1
                chosen.append((ids[1], forms[form_index(plural, PLURAL_N, len(forms), last)], 1))
        for english, translation, kind in chosen:
            if not translation:
                stats.add("gettext.untranslated")
                continue
            if not english.strip() or not translation.strip():  # "\n" -> "\n": no text at all
                stats.add("gettext.blank")
                continue
            yield (ctx, ids[0], kind), english, translation


class GettextSource(Source):
    """Pairs English msgids with their translations, or, for two non-English languages, the
    two translations of the same message (same domain, context and msgid). Order: domains
    sorted by name, then catalog order. Nothing is deduplicated or stripped; segments may hold
    newlines, which the fetch step handles with the input policy."""

    name = "gettext"

    class Config(PluginConfig):
        src: LangCode = Field(description="first language, ISO 639 code (en, ja, zh, ...)")
        tgt: LangCode = Field(description="second language, ISO 639 code, not equal to src")
        locales: dict[LangCode, LocaleName] = Field(
            default_factory=dict,
            max_length=2,
            description="language code -> locale directory name (default: zh -> zh_CN, "
            "others -> the code itself); not for en, whose text is the msgid",
        )
        locale_dir: str = Field(
            "/usr/share/locale",
            min_length=1,
            max_length=4096,
            description="directory holding <locale>/LC_MESSAGES/*.mo",
        )
        domains: list[DomainName] | None = Field(
            None,
            min_length=1,
            max_length=10_000,
            description="only these catalogs (.mo basenames, with or without .mo); null: all",
        )
        plurals: bool = Field(
            True, description="also pair msgid_plural with the plural form the catalog uses for n=5"
        )

        @model_validator(mode="after")
        def _check(self) -> GettextSource.Config:
            if self.src == self.tgt:
                raise ValueError(f"src and tgt are both {self.src!r}; give two different languages")
            extra = sorted(set(self.locales) - {self.src, self.tgt})
            if extra:
                raise ValueError(f"locales names {extra}, which are neither src nor tgt")
            if ENGLISH in self.locales:
                raise ValueError("locales cannot map 'en': the English side is always the msgid")
            if self.domains is not None:
                names = [d.removesuffix(".mo") for d in self.domains]
                if len(set(names)) != len(names):
                    raise ValueError(f"domains lists a catalog twice: {self.domains}")
            return self

    config: Config

    def langs(self) -> tuple[str, ...]:
        return (self.config.src, self.config.tgt)

    def fingerprint(self) -> str:
        """Path, size and mtime_ns of every catalog used (cheap: no file is read)."""
        files = sorted(p for pairs in self._catalogs().values() for p in pairs)
        return json.dumps([[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files])

    def read(self, policy: Any, stats: Any) -> Iterator[Pair]:
        cfg = self.config
        for paths in self._catalogs().values():
            if ENGLISH in (cfg.src, cfg.tgt):
                units = catalog_units(paths[0], stats, cfg.plurals)
                english_first = cfg.src == ENGLISH
                for _key, english, translation in units:
                    stats.add("gettext.pairs")
                    yield (english, translation) if english_first else (translation, english)
            else:
                yield from self._pivot(paths[0], paths[1], stats)

    def _pivot(self, src_path: Path, tgt_path: Path, stats: Stats) -> Iterator[Pair]:
        targets = {
            key: text for key, _, text in catalog_units(tgt_path, stats, self.config.plurals)
        }
        for key, _english, text in catalog_units(src_path, stats, self.config.plurals):
            if key not in targets:
                stats.add("gettext.unmatched")
                continue
            stats.add("gettext.pairs")
            yield text, targets[key]

    def _locale(self, lang: str) -> str:
        return self.config.locales.get(lang) or DEFAULT_LOCALES.get(lang, lang)

    def _catalogs(self) -> dict[str, list[Path]]:
        """Domain -> the .mo file of each non-English language (one, or two when pivoting)."""
        cfg = self.config
        found = {lang: self._language_catalogs(lang) for lang in self.langs() if lang != ENGLISH}
        common = sorted(set.intersection(*(set(catalogs) for catalogs in found.values())))
        if cfg.domains is not None:
            wanted = sorted(d.removesuffix(".mo") for d in cfg.domains)
            for domain in wanted:
                for lang, catalogs in found.items():
                    if domain not in catalogs:
                        raise DataError(
                            f"{self._messages_dir(lang)}: no catalog {domain}.mo for {lang!r} "
                            f"(listed in domains); catalogs there: {', '.join(sorted(catalogs))}"
                        )
            common = wanted
        if not common:
            dirs = " and ".join(str(self._messages_dir(lang)) for lang in found)
            raise DataError(f"{dirs}: no gettext catalog (domain) exists for both languages")
        return {domain: [catalogs[domain] for catalogs in found.values()] for domain in common}

    def _root(self) -> Path:
        return Path(self.config.locale_dir).expanduser().absolute()

    def _messages_dir(self, lang: str) -> Path:
        return self._root() / self._locale(lang) / "LC_MESSAGES"

    def _language_catalogs(self, lang: str) -> dict[str, Path]:
        directory = self._messages_dir(lang)
        catalogs = {p.stem: p for p in sorted(directory.glob("*.mo")) if p.is_file()}
        if catalogs:
            return catalogs
        root = self._root()
        if not root.is_dir():
            raise DataError(
                f"{root}: locale_dir does not exist; set locale_dir to the directory "
                "holding <locale>/LC_MESSAGES/*.mo (usually /usr/share/locale)"
            )
        existing = sorted({p.parent.parent.name for p in root.glob("*/LC_MESSAGES/*.mo")})
        close = [name for name in existing if name.split("_")[0].split("@")[0] == lang]
        hint = f"locales for {lang!r}: {', '.join(close)}; " if close else ""
        raise DataError(
            f"{directory}: no gettext catalogs (*.mo) for {lang!r}; {hint}locales with catalogs "
            f"in {root}: {', '.join(existing) or 'none'} (set locales: {{{lang}: <one of these>}})"
        )

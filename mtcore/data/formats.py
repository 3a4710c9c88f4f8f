"""Corpus formats beyond one segment per line: the ``.sgm`` files of WMT up to 2020, the XML of
WMT21 and later, and the ``train.tags`` files of IWSLT/TED.

Segments are cleaned as sacrebleu cleans them (leading and trailing space removed, runs of
whitespace made one space), so that a set read here equals sacrebleu's text of it.

``.sgm`` ("fake SGML", one file per language): every line that starts with ``<seg`` is one
segment, ``<seg id="1">text</seg>``; the text is taken as it stands (no entity decoding, as
sacrebleu does). Both files must have the same number of segments; every input-policy rule
applies to the ``<seg>`` lines, with the file's own line numbers.

WMT XML (one file, ``<dataset><collection><doc><src lang=..><p><seg id=..>`` with references
under ``<ref lang=.. translator=..>``): each language of the corpus is the ``src`` of that
language or its ``ref``; ``translator`` picks one where a document has several references.
Documents marked ``testsuite`` are skipped and counted; a segment missing or empty on one side
(sacrebleu skips those too) is dropped and counted as ``input.xml_unpaired_dropped``.

IWSLT ``train.tags.<pair>.<lang>`` (TED talks, one file per language): the talk metadata lines
(``<url>``, ``<talkid>``, ``<keywords>``, ``<speaker>``, ``<reviewer>``, ``<translator>``) are
skipped and ``<title>``/``<description>`` lines keep their text without the tags — what
fairseq's ``prepare-iwslt14.sh`` and most IWSLT recipes do. Both files must keep the same
number of lines.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence

from mtcore.contracts.errors import DataError
from mtcore.contracts.plugin import Pair
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import Input, InputPolicy, LineReader, open_input, zip_aligned
from mtcore.exec.streams import CORRUPT

SEG = re.compile(r"<seg\b[^>]*>(.*)</seg>", re.DOTALL)
# Talk metadata lines of an IWSLT train.tags file (and the closing tags some versions split off)
TED_META: tuple[bytes, ...] = (b"<url", b"<talkid", b"<keywords", b"<speaker", b"<reviewer")
TED_META += (b"<translator", b"</reviewer", b"</translator")
TED_KEPT = re.compile(r"\s*<(title|description)>(.*)</\1>\s*", re.DOTALL)
SPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    return SPACE.sub(" ", text.strip())


def is_seg(raw: bytes) -> bool:
    return raw.startswith(b"<seg")


def sgm_segments(
    path: Input, policy: InputPolicy, stats: Stats
) -> Iterator[tuple[int, str | None]]:
    """``(line number, segment | None)`` for each ``<seg>`` line (None: the policy dropped it)."""
    for number, text in LineReader(path, policy, stats, select=is_seg):
        if text is None:
            yield number, None
            continue
        found = SEG.match(text)  # anchored: search tried every later "<seg" (quadratic)
        if found is None:
            raise DataError(f"{path}:{number}: a <seg line without </seg>: {text[:80]!r}")
        yield number, clean(found.group(1))


def read_sgm(paths: Sequence[Input], policy: InputPolicy, stats: Stats) -> Iterator[Pair]:
    readers = [sgm_segments(p, policy, stats) for p in paths]
    return zip_aligned(readers, paths, policy, stats, "segments")


def is_ted_text(raw: bytes) -> bool:
    return not raw.startswith(TED_META)


def ted_lines(path: Input, policy: InputPolicy, stats: Stats) -> Iterator[tuple[int, str | None]]:
    """``(line number, text | None)`` of the lines of a ``train.tags`` file that are text."""
    for number, text in LineReader(path, policy, stats, select=is_ted_text):
        kept = TED_KEPT.fullmatch(text) if text is not None else None
        yield number, kept.group(2) if kept is not None else text


def read_ted(paths: Sequence[Input], policy: InputPolicy, stats: Stats) -> Iterator[Pair]:
    readers = [ted_lines(p, policy, stats) for p in paths]
    return zip_aligned(readers, paths, policy, stats, "lines")


def read_wmt_xml(
    path: Input, langs: Sequence[str], translator: str | None, policy: InputPolicy, stats: Stats
) -> Iterator[Pair]:
    """Pairs of the ``langs`` sides of every document, in file order (streamed by document)."""
    found = 0
    with open_input(path) as handle:
        try:
            for _, element in ET.iterparse(handle, events=("end",)):
                if element.tag != "doc":
                    continue
                pairs = list(doc_pairs(element, path, langs, translator, stats))
                found += 1
                element.clear()
                yield from (p for p in pairs if keep(p, policy, stats, path))
        except ET.ParseError as exc:
            line = exc.position[0]
            raise DataError(
                f"{path}:{line}: not well-formed XML ({exc}); a WMT XML test set is expected"
            ) from exc
        except CORRUPT as exc:
            raise DataError(
                f"{path}: cannot be read, truncated or corrupt ({type(exc).__name__}: {exc})"
            ) from exc
    if not found:
        raise DataError(f"{path}: no <doc> element; not a WMT XML test set")


def keep(pair: Pair, policy: InputPolicy, stats: Stats, path: Input) -> bool:
    if all(pair):
        return True
    if policy.empty == "error":
        raise DataError(f"{path}: empty segment (set input.empty: keep | drop)")
    if policy.empty == "drop":
        stats.add("input.empty_dropped")
        return False
    return True


def doc_pairs(
    doc: ET.Element, path: Input, langs: Sequence[str], translator: str | None, stats: Stats
) -> Iterator[Pair]:
    docid = doc.get("id", "?")
    if "testsuite" in doc.attrib:
        stats.add("input.xml_testsuite_docs_skipped")
        return
    sides = [segments(side(doc, lang, translator, path, docid)) for lang in langs]
    for seg_id in sides[0]:
        texts = [s.get(seg_id) for s in sides]
        if any(t is None for t in texts) or not all(texts[1:]):
            stats.add("input.xml_unpaired_dropped")
            continue
        yield tuple(t or "" for t in texts)
    missing = sum(1 for s in sides[1:] for seg_id in s if seg_id not in sides[0])
    if missing:
        stats.add("input.xml_unpaired_dropped", missing)


def side(doc: ET.Element, lang: str, translator: str | None, path: Input, docid: str) -> ET.Element:
    """The ``src`` or ``ref`` element of ``doc`` in ``lang``."""
    src = [e for e in doc.findall("src") if e.get("lang") == lang]
    if src:
        return src[0]
    refs = [e for e in doc.findall("ref") if e.get("lang") == lang]
    names = [str(e.get("translator")) for e in refs]
    if translator is not None:
        refs = [e for e in refs if e.get("translator") == translator]
    if len(refs) == 1:
        return refs[0]
    where = f"{path}: doc {docid!r}"
    if not refs and not names:
        present = sorted({f"{e.tag} {e.get('lang')}" for e in doc if e.tag in ("src", "ref")})
        raise DataError(f"{where} has no <src> or <ref> in {lang!r}; it has {present}")
    if not refs:
        raise DataError(f"{where}: no {lang!r} reference by translator {translator!r}; {names}")
    raise DataError(
        f"{where} has {len(refs)} {lang!r} references (translators {names}); choose one "
        "with translator:"
    )


def segments(element: ET.Element) -> dict[str, str]:
    return {str(seg.get("id")): clean(seg.text or "") for seg in element.iter("seg")}

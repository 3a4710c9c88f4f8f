"""WMT test-set formats (.sgm per language, WMT21+ XML), built from real newstest2021 lines in
the exact layouts WMT ships, read through ``local`` (files, archives) and ``url``."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

import pytest

from mtcore.contracts.errors import DataError
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import InputPolicy
from mtcore.data.formats import clean
from mtcore_plugins.sources.local import LocalSource
from mtcore_plugins.sources.url import UrlSource
from tests.plugins.sources.test_sources import LoopbackServer
from tests.support.data import SHARED

TESTSETS = SHARED / "en-ja" / "Helsinki-NLP+OPUS-MT-testsets" / "testsets"
ENJA = TESTSETS / "eng-jpn" / "newstest2021"
ZHEN = SHARED / "zh-en" / "Helsinki-NLP+OPUS-MT-testsets" / "testsets" / "zho-eng" / "newstest2021"


def lines(stem: Path, suffix: str, n: int) -> list[str]:
    path = stem.with_name(f"{stem.name}.{suffix}")
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path.read_text(encoding="utf-8").split("\n")[:n]


def run(source, policy: InputPolicy | None = None) -> tuple[list[tuple[str, ...]], Stats]:
    stats = Stats()
    return list(source.read(policy or InputPolicy(), stats)), stats


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MTCORE_CACHE", str(tmp_path / "mtcore-cache"))


def sgm(segments: list[str], kind: str, lang: str) -> bytes:
    """A WMT ``.sgm`` file (as newstest2020-enja-src.en.sgm): two documents, raw text."""
    tag = {"src": "srcset", "ref": "refset"}[kind]
    out = [f'<{tag} setid="newstest2021" srclang="any" trglang="{lang}">']
    half = len(segments) // 2
    for doc, part in enumerate((segments[:half], segments[half:]), start=1):
        out.append(f'<doc sysid="{kind}" docid="news.{doc}" genre="news" origlang="en">')
        out.append("<p>")
        out += [f'<seg id="{i}">{text}</seg>' for i, text in enumerate(part, start=1)]
        out.append("</p>\n</doc>")
    out.append(f"</{tag}>")
    return ("\n".join(out) + "\n").encode("utf-8")


@pytest.fixture
def enja_sgm(tmp_path) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    en, ja = lines(ENJA, "eng", 60), lines(ENJA, "jpn", 60)
    en[3] = "  AT&T  said   so. "  # raw '&' and runs of space: kept raw, spaces cleaned
    paths = {"en": tmp_path / "newstest2021-enja-src.en.sgm", "ja": tmp_path / "ref.ja.sgm"}
    paths["en"].write_bytes(sgm(en, "src", "en"))
    paths["ja"].write_bytes(sgm(ja, "ref", "ja"))
    return paths, [(clean(e), clean(j)) for e, j in zip(en, ja, strict=True)]


def test_sgm_files_are_read_as_sacrebleu_reads_them(enja_sgm) -> None:
    paths, expected = enja_sgm
    pairs, _ = run(LocalSource.from_dict({"files": {k: str(v) for k, v in paths.items()}}))
    assert pairs == expected and pairs[3][0] == "AT&T said so."
    assert any(re.search(r"[\u3040-\u30ff]", ja) for _, ja in pairs)


def test_sgm_format_is_explicit_or_by_name(enja_sgm) -> None:
    paths, expected = enja_sgm
    files = {k: str(v) for k, v in paths.items()}
    # forced to text: the markup lines are segments, as written
    text, _ = run(LocalSource.from_dict({"files": files, "format": "text"}))
    assert text[0][0].startswith("<srcset") and len(text) > len(expected)
    renamed = {k: v.rename(v.with_suffix(".txt")) for k, v in paths.items()}
    config = {"files": {k: str(v) for k, v in renamed.items()}, "format": "sgm"}
    assert run(LocalSource.from_dict(config))[0] == expected


def test_sgm_segment_counts_must_match(enja_sgm) -> None:
    paths, _ = enja_sgm
    body = paths["ja"].read_text(encoding="utf-8").replace('<seg id="2">', "<!-- gone -->", 1)
    paths["ja"].write_text(body, encoding="utf-8")
    source = LocalSource.from_dict({"files": {k: str(v) for k, v in paths.items()}})
    with pytest.raises(
        DataError, match=r"ref\.ja\.sgm has 59 segments but \S+src\.en\.sgm has more"
    ):
        run(source)


def test_sgm_policy_rules_name_the_file_line(enja_sgm) -> None:
    paths, expected = enja_sgm
    raw = paths["ja"].read_bytes().replace(b'<seg id="5">', b'<seg id="5">\xff', 1)
    paths["ja"].write_bytes(raw)
    source = LocalSource.from_dict({"files": {k: str(v) for k, v in paths.items()}})
    with pytest.raises(DataError, match=r"ref\.ja\.sgm:8: invalid UTF-8"):
        run(source)
    pairs, stats = run(source, InputPolicy(invalid_utf8="drop"))
    assert pairs == expected[:4] + expected[5:] and stats["input.pairs_dropped"] == 1


def test_sgm_members_of_a_wmt_dev_tarball(tmp_path, enja_sgm) -> None:
    """WMT20's dev.tgz layout: dev/newsdev2020-enja-{src.en,ref.ja}.sgm among other sets."""
    paths, expected = enja_sgm
    archive = tmp_path / "dev.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, path in [
            ("dev/newsdev2020-enja-src.en.sgm", paths["en"]),
            ("dev/newsdev2020-enja-ref.ja.sgm", paths["ja"]),
            ("dev/newsdev2020-jaen-src.ja.sgm", paths["ja"]),
        ]:
            tar.add(path, arcname=name)
    member = {"en": "dev/newsdev2020-enja-src.en.sgm", "ja": "dev/newsdev2020-enja-ref.ja.sgm"}
    assert run(LocalSource.from_dict({"archive": str(archive), "member": member}))[0] == expected
    with pytest.raises(DataError, match=r"2 members match 'dev/\*\.ja\.sgm' \(member\.ja\)"):
        run(LocalSource.from_dict({"archive": str(archive), "member": {"ja": "dev/*.ja.sgm"}}))


def wmt_xml(zh: list[str], en: list[str]) -> bytes:
    """A WMT21+ test set: a news doc with refs by translators A and B, a doc whose segment 2
    has no reference, and a test-suite doc."""
    root = ET.Element("dataset", id="newstest2021")
    collection = ET.SubElement(root, "collection", id="general")

    def doc(docid: str, src: list[str], refs: dict[str, list[str | None]], **attrs: str) -> None:
        element = ET.SubElement(collection, "doc", id=docid, origlang="zh", **attrs)
        sides = [("src", {"lang": "zh"}, list(src))]
        sides += [("ref", {"lang": "en", "translator": t}, r) for t, r in refs.items()]
        for tag, attributes, texts in sides:
            paragraph = ET.SubElement(ET.SubElement(element, tag, **attributes), "p")
            for number, text in enumerate(texts, start=1):
                if text is not None:
                    ET.SubElement(paragraph, "seg", id=str(number)).text = text

    doc("news.1", zh[:10], {"A": en[:10], "B": [e.upper() for e in en[:10]]})
    doc("news.2", zh[10:15], {"A": [en[10], None, *en[12:15]], "B": en[10:15]})
    doc("suite.1", zh[15:17], {"A": en[15:17]}, testsuite="yes")
    ET.indent(root)  # one element per line, as WMT ships them
    buffer = io.BytesIO()
    ET.ElementTree(root).write(buffer, encoding="utf-8", xml_declaration=True)
    return buffer.getvalue()


@pytest.fixture
def zhen_xml(tmp_path) -> tuple[Path, list[str], list[str]]:
    zh, en = lines(ZHEN, "zho", 20), lines(ZHEN, "eng", 20)
    path = tmp_path / "newstest2021.zh-en.all.xml"
    path.write_bytes(wmt_xml(zh, en))
    return path, zh, en


def test_wmt_xml_reads_src_and_the_chosen_reference(zhen_xml) -> None:
    path, zh, en = zhen_xml
    source = LocalSource.from_dict({"xml": str(path), "langs": ["zh", "en"], "translator": "A"})
    pairs, stats = run(source)
    keep = [i for i in range(15) if i != 11]  # doc news.2 segment 2 has no reference by A
    assert pairs == [(clean(zh[i]), clean(en[i])) for i in keep]
    assert stats["input.xml_unpaired_dropped"] == 1
    assert stats["input.xml_testsuite_docs_skipped"] == 1
    reverse = LocalSource.from_dict({"xml": str(path), "langs": ["en", "zh"], "translator": "B"})
    assert run(reverse)[0][0] == (clean(en[0]).upper(), clean(zh[0]))


XML_ERRORS = [
    # two references and no choice: the error names the translators
    ({"langs": ["zh", "en"]}, r"doc 'news\.1' has 2 'en' references \(translators \['A', 'B'\]\)"),
    # a translator the file does not have
    (
        {"langs": ["zh", "en"], "translator": "C"},
        r"no 'en' reference by translator 'C'; \['A', 'B'\]",
    ),
    # a language the file does not have
    ({"langs": ["zh", "ja"]}, r"has no <src> or <ref> in 'ja'; it has \['ref en', 'src zh'\]"),
]


@pytest.mark.parametrize(("config", "message"), XML_ERRORS)
def test_wmt_xml_errors(zhen_xml, config, message) -> None:
    with pytest.raises(DataError, match=message):
        run(LocalSource.from_dict({"xml": str(zhen_xml[0])} | config))


def test_wmt_xml_not_well_formed_names_the_line(tmp_path, zhen_xml) -> None:
    body = zhen_xml[0].read_bytes().replace(b"</seg>", b"</sge>", 1)
    zhen_xml[0].write_bytes(body)
    line = body[: body.index(b"</sge>")].count(b"\n") + 1
    assert line > 5
    with pytest.raises(DataError, match=rf"all\.xml:{line}: not well-formed XML"):
        run(LocalSource.from_dict({"xml": str(zhen_xml[0]), "langs": ["zh", "en"]}))


def test_wmt_xml_member_through_url(tmp_path, monkeypatch, zhen_xml) -> None:
    """sacrebleu's wmt21 download: a GitHub release tarball holding xml/<set>.<pair>.all.xml."""
    path, zh, en = zhen_xml
    archive = tmp_path / "v1.3.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(path, arcname="wmt21-news-systems-1.3/xml/newstest2021.zh-en.all.xml")
        tar.addfile(tarfile.TarInfo("wmt21-news-systems-1.3/README.md"), io.BytesIO())
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    server = LoopbackServer()
    try:
        server.files["/archive/refs/tags/v1.3.tar.gz"] = body = archive.read_bytes()
        spec = {"url": server.url("/archive/refs/tags/v1.3.tar.gz")}
        config = {
            "archive": spec | {"sha256": hashlib.sha256(body).hexdigest()},
            "member": "*/xml/newstest2021.zh-en.all.xml",
            "langs": ["zh", "en"],
            "translator": "A",
            "cache_dir": str(tmp_path / "downloads"),
        }
        pairs, _ = run(UrlSource.from_dict(config))
    finally:
        server.close()
    assert pairs[:3] == [(clean(zh[i]), clean(en[i])) for i in range(3)] and len(pairs) == 14


def test_sgm_escaped_text_is_kept_as_written(tmp_path) -> None:
    """Like sacrebleu, .sgm text is not entity-decoded (old WMT files hold raw '&' and '<')."""
    body = sgm([escape("a < b & c"), "x"], "src", "en")
    (tmp_path / "s.en.sgm").write_bytes(body)
    (tmp_path / "s.ja.sgm").write_bytes(sgm(["y", "z"], "ref", "ja"))
    files = {"en": str(tmp_path / "s.en.sgm"), "ja": str(tmp_path / "s.ja.sgm")}
    assert run(LocalSource.from_dict({"files": files}))[0][0] == ("a &lt; b &amp; c", "y")


def train_tags(texts: list[str], lang: str) -> bytes:
    """IWSLT17's train.tags.en-ja.<lang>: two talks, each metadata, title, description, text."""
    out = []
    for talk, part in enumerate((texts[:10], texts[10:]), start=1):
        out += [
            f"<url>http://www.ted.com/talks/talk_{talk}</url>",
            "<keywords>talks, science</keywords>",
            f"<speaker>Speaker {talk}</speaker>",
            f"<talkid>{talk}</talkid>",
            f"<title>{part[0]}</title>",
            f"<description>{part[1]}</description>",
            *part[2:],
            f'<reviewer href="http://www.ted.com/profiles/{talk}">R {lang}</reviewer>',
            f'<translator href="http://www.ted.com/profiles/{talk}">T {lang}</translator>',
        ]
    return ("\n".join(out) + "\n").encode("utf-8")


def test_iwslt_train_tags_keep_text_title_and_description(tmp_path) -> None:
    en, ja = lines(ENJA, "eng", 20), lines(ENJA, "jpn", 20)
    archive = tmp_path / "en-ja.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for lang, texts in (("en", en), ("ja", ja)):
            body = train_tags(texts, lang)
            info = tarfile.TarInfo(f"en-ja/train.tags.en-ja.{lang}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    member = {"en": "*/train.tags.en-ja.en", "ja": "*/train.tags.en-ja.ja"}
    pairs, _ = run(LocalSource.from_dict({"archive": str(archive), "member": member}))
    assert pairs == list(zip(en, ja, strict=True))  # metadata gone, title/description kept
    raw, _ = run(
        LocalSource.from_dict({"archive": str(archive), "member": member, "format": "text"})
    )
    assert raw[0][0].startswith("<url>") and len(raw) == len(pairs) + 12

"""Source plugins: local files, gettext catalogs, HTTP downloads (loopback server only)."""

from __future__ import annotations

import gettext
import gzip
import hashlib
import http.server
import json
import logging
import os
import re
import ssl
import struct
import threading
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from mtcore.contracts.errors import DataError
from mtcore.contracts.identity import identity_dict
from mtcore.contracts.registry import load_registry
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import InputPolicy
from mtcore.recipe.hashing import content_hash
from mtcore_plugins.common.hub.download import FileSpec
from mtcore_plugins.sources.gettext import GettextSource, catalog_units
from mtcore_plugins.sources.local import LocalSource
from mtcore_plugins.sources.url import UrlSource

ENJA = Path("/work/shared/data/en-ja/odashi+small_parallel_enja")
LOCALE = Path("/usr/share/locale")


def run(source, policy: InputPolicy | None = None) -> tuple[list[tuple[str, ...]], Stats]:
    stats = Stats()
    return list(source.read(policy or InputPolicy(), stats)), stats


@pytest.fixture
def enja() -> tuple[list[str], list[str]]:
    """The first 40 lines of the real small_parallel_enja dev set."""
    if not (ENJA / "dev.en").is_file():
        pytest.skip(f"{ENJA} not available")
    en = (ENJA / "dev.en").read_bytes().decode("utf-8").split("\n")[:40]
    ja = (ENJA / "dev.ja").read_bytes().decode("utf-8").split("\n")[:40]
    return en, ja


@pytest.mark.parametrize("name", ["local", "gettext", "url"])
def test_entry_point_names_the_class(name: str) -> None:
    assert load_registry().load("sources", name).name == name


# ---------------------------------------------------------------- local


@pytest.fixture
def layouts(tmp_path, monkeypatch, enja) -> tuple[list[str], list[str]]:
    """plain/train.{en,ja}, gz/train.{en,ja}.gz and train.tsv (ja, id, en) under the cwd."""
    en, ja = enja
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain").mkdir()
    (tmp_path / "gz").mkdir()
    for lang, lines in (("en", en), ("ja", ja)):
        data = "".join(f"{line}\n" for line in lines).encode("utf-8")
        (tmp_path / "plain" / f"train.{lang}").write_bytes(data)
        (tmp_path / "gz" / f"train.{lang}.gz").write_bytes(gzip.compress(data))
    rows = "".join(f"{j}\t{i}\t{e}\n" for i, (e, j) in enumerate(zip(en, ja, strict=True)))
    (tmp_path / "train.tsv").write_text(rows, encoding="utf-8")
    return en, ja


LOCAL_FORMS = [
    # one plain file per language, paths relative to the cwd
    ({"files": {"en": "plain/train.en", "ja": "plain/train.ja"}}, ("en", "ja")),
    # gzip is recognised by the .gz suffix
    ({"files": {"en": "gz/train.en.gz", "ja": "gz/train.ja.gz"}}, ("en", "ja")),
    # dict order is column order
    ({"files": {"ja": "plain/train.ja", "en": "plain/train.en"}}, ("ja", "en")),
    # dir + prefix + langs names <dir>/<prefix>.<lang>
    ({"dir": "plain", "prefix": "train", "langs": ["en", "ja"]}, ("en", "ja")),
    # dir + prefix falls back to <prefix>.<lang>.gz
    ({"dir": "gz", "prefix": "train", "langs": ["ja", "en"]}, ("ja", "en")),
    # tsv columns in any order, skipping the id column
    ({"tsv": "train.tsv", "columns": {"en": 2, "ja": 0}}, ("en", "ja")),
    # monolingual from one file
    ({"files": {"ja": "plain/train.ja"}}, ("ja",)),
    # monolingual from one tsv column
    ({"tsv": "train.tsv", "columns": {"en": 2}}, ("en",)),
]


@pytest.mark.parametrize(("config", "langs"), LOCAL_FORMS)
def test_local_forms(layouts, config, langs) -> None:
    columns = dict(zip(("en", "ja"), layouts, strict=True))
    source = LocalSource.from_dict(config)
    pairs, _ = run(source)
    assert source.langs() == langs
    assert pairs == list(zip(*(columns[lang] for lang in langs), strict=True))


LOCAL_BAD_CONFIGS = [
    # nothing given
    ({}, "exactly one of"),
    # two forms at once
    ({"files": {"en": "a"}, "tsv": "b", "columns": {"en": 0}}, "got files and tsv + columns"),
    # an incomplete dir form
    ({"dir": "d", "langs": ["en"]}, "also needs prefix"),
    # tsv without columns
    ({"tsv": "b"}, "also needs columns"),
    # one column read for two languages is surely a typo
    ({"tsv": "b", "columns": {"en": 0, "ja": 0}}, "one column for two languages"),
    # a language becomes a file suffix: no dots or slashes
    ({"files": {"en/x": "a"}}, "String should match pattern"),
    # negative column
    ({"tsv": "b", "columns": {"en": -1}}, "greater than or equal to 0"),
    # unknown key
    ({"files": {"en": "a"}, "path": "x"}, "Extra inputs are not permitted"),
    # a separator means nothing for one file per language
    ({"files": {"en": "a"}, "separator": " ||| "}, "separator applies to a tsv file only"),
]


@pytest.mark.parametrize(("config", "message"), LOCAL_BAD_CONFIGS)
def test_local_config_errors(config, message) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        LocalSource.from_dict(config)


MICROTOPIA = ENJA.parents[1] / "zh-en" / "wlin12+SMMTT" / "data" / "parallel_dev"


def test_local_separator_reads_pair_files(tmp_path) -> None:
    """Microtopia's ``English ||| Chinese`` lines, read with ``separator``; a line without the
    separator stops the read and names the file and line."""
    lines = (MICROTOPIA / "microtopia_dev.en-zh").read_text(encoding="utf-8").splitlines()[:200]
    path = tmp_path / "dev.en-zh"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = LocalSource.from_dict(
        {"tsv": str(path), "columns": {"zh": 1, "en": 0}, "separator": " ||| "}
    )
    pairs, _ = run(source)
    assert pairs == [tuple(reversed(line.split(" ||| "))) for line in lines]
    assert all(re.search(r"[\u4e00-\u9fff]", zh) and " ||| " not in en for zh, en in pairs)
    path.write_text("\n".join([*lines[:5], "no separator here", *lines[5:9]]) + "\n")
    with pytest.raises(DataError, match=r"dev.en-zh:6: expected at least 2 ' \|\|\| '-separated"):
        run(source)


def test_local_missing_file_names_it(layouts, tmp_path) -> None:
    source = LocalSource.from_dict({"files": {"en": "plain/train.en", "ja": "nope.ja"}})
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'nope.ja'}: file for 'ja'")):
        source.fingerprint()
    with pytest.raises(DataError, match="does not exist"):
        run(source)


def test_local_missing_file_says_how_to_obtain_it(layouts, tmp_path) -> None:
    how = "register at https://example.org/corpus, download c.tgz and put it at data/c.tgz"
    source = LocalSource.from_dict(
        {"archive": "data/c.tgz", "member": "c.tsv", "columns": {"en": 0, "zh": 1}, "obtain": how}
    )
    expected = re.escape(f"{tmp_path / 'data/c.tgz'}: archive does not exist")
    with pytest.raises(DataError, match=rf"{expected}.*To obtain it: {re.escape(how)}$"):
        source.fingerprint()
    with pytest.raises(DataError, match=re.escape(how)):
        run(source)


def test_local_obtain_stays_out_of_the_hash() -> None:
    plain = {"files": {"en": "a.en", "zh": "a.zh"}}
    told = {**plain, "obtain": "ask the data owner"}
    assert identity_dict(LocalSource.from_dict(plain).config) == identity_dict(
        LocalSource.from_dict(told).config
    )


def test_local_fingerprint_follows_files(layouts, tmp_path) -> None:
    source = LocalSource.from_dict({"dir": "plain", "prefix": "train", "langs": ["en", "ja"]})
    before = source.fingerprint()
    en, ja = tmp_path / "plain" / "train.en", tmp_path / "plain" / "train.ja"
    assert json.loads(before) == [hashlib.sha256(p.read_bytes()).hexdigest() for p in (en, ja)]
    assert source.fingerprint() == before
    with open(ja, "a", encoding="utf-8") as handle:
        handle.write("追加\n")
    assert source.fingerprint() != before


def test_local_fingerprint_survives_copy_and_touch(layouts, tmp_path, monkeypatch) -> None:
    """A data directory copied again (new mtimes and inodes, same bytes) keeps the fingerprint,
    and so the cached steps; a same-size edit under a new mtime does not."""
    monkeypatch.setenv("MTCORE_CACHE", str(tmp_path / "cache"))
    source = LocalSource.from_dict({"dir": "plain", "prefix": "train", "langs": ["en", "ja"]})
    before = source.fingerprint()
    assert (tmp_path / "cache" / "file-hashes.sqlite").is_file()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("train.en", "train.ja"):
        (copy / name).write_bytes((tmp_path / "plain" / name).read_bytes())
    (tmp_path / "plain").rename(tmp_path / "old")
    copy.rename(tmp_path / "plain")
    assert source.fingerprint() == before
    ja = tmp_path / "plain" / "train.ja"
    os.utime(ja, ns=(ja.stat().st_atime_ns, ja.stat().st_mtime_ns + 10**9))
    assert source.fingerprint() == before
    text = ja.read_bytes()
    ja.write_bytes(text[:-2] + bytes([text[-2] ^ 1]) + text[-1:])  # same size, one bit flipped
    os.utime(ja, ns=(ja.stat().st_atime_ns, ja.stat().st_mtime_ns + 2 * 10**9))
    assert source.fingerprint() != before


def test_content_hash_without_a_writable_cache(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("MTCORE_CACHE", str(blocker / "cache"))
    path = tmp_path / "a.txt"
    path.write_text("line\n")
    assert content_hash(path) == hashlib.sha256(b"line\n").hexdigest()


def write_pair(tmp_path: Path, en: bytes, ja: bytes) -> LocalSource:
    (tmp_path / "c.en").write_bytes(en)
    (tmp_path / "c.ja").write_bytes(ja)
    return LocalSource.from_dict(
        {"files": {"en": str(tmp_path / "c.en"), "ja": str(tmp_path / "c.ja")}}
    )


def test_local_mismatched_line_counts_name_the_short_file(tmp_path, enja) -> None:
    en, ja = enja
    source = write_pair(
        tmp_path, "\n".join(en[:10]).encode() + b"\n", "\n".join(ja[:9]).encode() + b"\n"
    )
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'c.ja'} has 9 lines")):
        run(source)


def test_local_crlf_is_stripped_and_counted(tmp_path, enja) -> None:
    en, ja = (lines[:10] for lines in enja)
    source = write_pair(
        tmp_path, "\r\n".join(en).encode() + b"\r\n", "\n".join(ja).encode() + b"\n"
    )
    pairs, stats = run(source)
    assert pairs == list(zip(en, ja, strict=True))
    assert stats["input.crlf_stripped"] == 10


def test_local_invalid_utf8_names_file_and_line(tmp_path, enja) -> None:
    en, ja = (lines[:5] for lines in enja)
    bad = b"\n".join(
        [line.encode() for line in ja[:2]]
        + [b"\xff\xfe broken"]
        + [line.encode() for line in ja[3:]]
    )
    source = write_pair(tmp_path, "\n".join(en).encode() + b"\n", bad + b"\n")
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'c.ja'}:3: invalid UTF-8")):
        run(source)
    # drop removes the whole pair, never one side: the rest stays aligned
    pairs, stats = run(source, InputPolicy(invalid_utf8="drop"))
    assert pairs == [p for i, p in enumerate(zip(en, ja, strict=True)) if i != 2]
    assert stats["input.pairs_dropped"] == 1


# ---------------------------------------------------------------- gettext


def write_mo(path: Path, entries: list[tuple[bytes, bytes]], order: str = "<") -> None:
    """A minimal GNU .mo file (no hash table) in the given byte order."""
    count = len(entries)
    ids_at, strs_at = 28, 28 + 8 * count
    data_at = strs_at + 8 * count
    tables, blob = [b"", b""], b""
    for side in (0, 1):
        for entry in entries:
            tables[side] += struct.pack(order + "2I", len(entry[side]), data_at + len(blob))
            blob += entry[side] + b"\x00"
    head = struct.pack(order + "7I", 0x950412DE, 0, count, ids_at, strs_at, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head + tables[0] + tables[1] + blob)


def header(charset: str, plural_forms: str | None) -> tuple[bytes, bytes]:
    text = f"Content-Type: text/plain; charset={charset}\n"
    if plural_forms:
        text += f"Plural-Forms: {plural_forms}\n"
    return b"", text.encode("ascii")


CS_PLURALS = "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;"


def czech_entries(charset: str) -> list[tuple[bytes, bytes]]:
    def enc(text: str) -> bytes:
        return text.encode(charset)

    return [
        header(charset, CS_PLURALS),
        (b"%d file\x00%d files", enc("%d soubor\x00%d soubory\x00%d souborů")),
        (b"Bad", b"\xff\xfe\xff" if charset == "UTF-8" else b"\x81"),  # undecodable either way
        (b"Blank", b"  "),
        (b"Multi\nline", enc("Více\nřádků")),
        (b"Open", enc("Otevřít")),
        (b"Untranslated", b""),
        (b"menu\x04Open", enc("Otevřít nabídku")),
    ]


CZECH_PAIRS = [
    ("%d file", "%d soubor"),  # singular: the form for n=1
    ("%d files", "%d souborů"),  # plural: the form Plural-Forms gives n=5
    ("Multi\nline", "Více\nřádků"),  # kept as is: the fetch step handles newlines
    ("Open", "Otevřít"),
    ("Open", "Otevřít nabídku"),  # the context is dropped, not the entry
]


@pytest.mark.parametrize(
    ("order", "charset"),
    [
        ("<", "UTF-8"),  # the usual little-endian UTF-8 catalog
        (">", "UTF-8"),  # big-endian: the magic number tells the byte order
        ("<", "windows-1250"),  # a legacy charset named in the header
    ],
)
def test_gettext_parses_a_synthetic_catalog_exactly(tmp_path, order, charset) -> None:
    write_mo(tmp_path / "cs/LC_MESSAGES/demo.mo", czech_entries(charset), order)
    source = GettextSource.from_dict({"src": "en", "tgt": "cs", "locale_dir": str(tmp_path)})
    pairs, stats = run(source)
    assert pairs == CZECH_PAIRS
    assert stats.as_dict() == {
        "gettext.catalogs": 1,
        "gettext.pairs": 5,
        "gettext.undecodable": 1,
        "gettext.untranslated": 1,
        "gettext.blank": 1,
    }
    plurals_off = GettextSource.from_dict(
        {"src": "cs", "tgt": "en", "locale_dir": str(tmp_path), "plurals": False}
    )
    assert run(plurals_off)[0] == [(cs, en) for en, cs in CZECH_PAIRS if en != "%d files"]


def test_gettext_without_plural_forms_uses_first_and_last_form(tmp_path) -> None:
    entries = [header("UTF-8", None), (b"%d dog\x00%d dogs", "%d pes\x00%d psi\x00%d psů".encode())]
    write_mo(tmp_path / "cs/LC_MESSAGES/demo.mo", entries)
    source = GettextSource.from_dict({"src": "en", "tgt": "cs", "locale_dir": str(tmp_path)})
    assert run(source)[0] == [("%d dog", "%d pes"), ("%d dogs", "%d psů")]


def test_gettext_pivot_matches_msgid_and_context(tmp_path) -> None:
    write_mo(tmp_path / "cs/LC_MESSAGES/b.mo", czech_entries("UTF-8"))
    write_mo(tmp_path / "cs/LC_MESSAGES/a.mo", [(b"Yes", b"Ano")])
    sk = [
        header("UTF-8", CS_PLURALS),  # Slovak has the same plural rule
        (b"%d file\x00%d files", "%d súbor\x00%d súbory\x00%d súborov".encode()),
        (b"Only in Slovak", b"Len po slovensky"),
        (b"Open", "Otvoriť".encode()),
        (b"menu\x04Open", "Otvoriť ponuku".encode()),
    ]
    write_mo(tmp_path / "sk/LC_MESSAGES/b.mo", sk, ">")
    write_mo(tmp_path / "sk/LC_MESSAGES/c.mo", [(b"No", b"Nie")])  # no Czech counterpart
    source = GettextSource.from_dict({"src": "sk", "tgt": "cs", "locale_dir": str(tmp_path)})
    pairs, stats = run(source)
    assert pairs == [
        ("%d súbor", "%d soubor"),
        ("%d súborov", "%d souborů"),
        ("Otvoriť", "Otevřít"),
        ("Otvoriť ponuku", "Otevřít nabídku"),  # matched with its context
    ]
    assert stats["gettext.unmatched"] == 1
    used = json.loads(source.fingerprint())  # [[path, size, mtime_ns], ...]
    assert [Path(path).name for path, _, _ in used] == ["b.mo", "b.mo"]


def test_gettext_bad_catalog_is_counted_not_fatal(tmp_path) -> None:
    write_mo(tmp_path / "cs/LC_MESSAGES/good.mo", [(b"Yes", b"Ano")])
    (tmp_path / "cs/LC_MESSAGES/broken.mo").write_bytes(b"\x00" * 40)
    (tmp_path / "cs/LC_MESSAGES/short.mo").write_bytes(b"\xde\x12\x04\x95\x00\x00\x00\x00\x05")
    pairs, stats = run(
        GettextSource.from_dict({"src": "en", "tgt": "cs", "locale_dir": str(tmp_path)})
    )
    assert pairs == [("Yes", "Ano")]
    assert stats["gettext.bad_catalogs"] == 2


def test_gettext_missing_language_lists_existing_locales(tmp_path) -> None:
    write_mo(tmp_path / "pt_BR/LC_MESSAGES/demo.mo", [(b"Yes", b"Sim")])
    write_mo(tmp_path / "cs/LC_MESSAGES/demo.mo", [(b"Yes", b"Ano")])
    source = GettextSource.from_dict({"src": "en", "tgt": "pt", "locale_dir": str(tmp_path)})
    with pytest.raises(DataError) as caught:
        source.fingerprint()
    message = str(caught.value)
    assert str(tmp_path / "pt" / "LC_MESSAGES") in message
    assert "locales for 'pt': pt_BR" in message and "cs, pt_BR" in message
    mapped = GettextSource.from_dict(
        {"src": "en", "tgt": "pt", "locale_dir": str(tmp_path), "locales": {"pt": "pt_BR"}}
    )
    assert run(mapped)[0] == [("Yes", "Sim")]


def test_gettext_unknown_domain_is_an_error(tmp_path) -> None:
    write_mo(tmp_path / "cs/LC_MESSAGES/demo.mo", [(b"Yes", b"Ano")])
    source = GettextSource.from_dict(
        {"src": "en", "tgt": "cs", "locale_dir": str(tmp_path), "domains": ["demo", "other.mo"]}
    )
    with pytest.raises(DataError, match=r"no catalog other\.mo for 'cs'.*catalogs there: demo"):
        run(source)


GETTEXT_BAD_CONFIGS = [
    # a pair needs two languages
    ({"src": "ja", "tgt": "ja"}, "give two different languages"),
    # English is the msgid: a locale for it would be ignored
    ({"src": "en", "tgt": "ja", "locales": {"en": "en_GB"}}, "cannot map 'en'"),
    # a mapping for a language not in the pair is a typo
    ({"src": "en", "tgt": "ja", "locales": {"jp": "ja"}}, "neither src nor tgt"),
    # a locale name is one directory, never a path
    ({"src": "en", "tgt": "ja", "locales": {"ja": "../ja"}}, "String should match pattern"),
    # the same catalog twice would duplicate its pairs
    ({"src": "en", "tgt": "ja", "domains": ["sed", "sed.mo"]}, "lists a catalog twice"),
]


@pytest.mark.parametrize(("config", "message"), GETTEXT_BAD_CONFIGS)
def test_gettext_config_errors(config, message) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        GettextSource.from_dict(config)


@pytest.fixture(scope="module")
def system_enja() -> list[tuple[str, ...]]:
    if not list((LOCALE / "ja" / "LC_MESSAGES").glob("*.mo")):
        pytest.skip(f"no Japanese gettext catalogs in {LOCALE}")
    return run(GettextSource.from_dict({"src": "en", "tgt": "ja"}))[0]


def test_gettext_system_enja(system_enja) -> None:
    # 40,035 pairs from 80 catalogs on the reference machine; other distributions differ
    assert 5_000 <= len(system_enja) <= 200_000
    assert all(en.strip() and ja.strip() for en, ja in system_enja)
    if (LOCALE / "ja/LC_MESSAGES/sed.mo").is_file():
        assert ("missing command", "コマンドが足りません") in system_enja


def test_gettext_english_side_follows_config_order(system_enja) -> None:
    if not (LOCALE / "ja/LC_MESSAGES/sed.mo").is_file():
        pytest.skip("no Japanese sed catalog")
    reverse = run(GettextSource.from_dict({"src": "ja", "tgt": "en", "domains": ["sed"]}))[0]
    forward = run(GettextSource.from_dict({"src": "en", "tgt": "ja", "domains": ["sed"]}))[0]
    assert reverse == [(ja, en) for en, ja in forward]
    assert set(forward) <= set(system_enja)


def test_gettext_agrees_with_the_standard_library() -> None:
    """Every unit of a real catalog is what Python's own gettext returns for it."""
    path = LOCALE / "ja/LC_MESSAGES/coreutils.mo"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    with open(path, "rb") as handle:
        catalog = gettext.GNUTranslations(handle)
    units = list(catalog_units(path, Stats(), plurals=True))
    assert len(units) > 1000
    for (ctx, msgid, kind), english, translation in units:
        if kind == 1:
            assert catalog.ngettext(msgid, english, 5) == translation
        elif ctx is not None:
            assert catalog.pgettext(ctx, msgid) == translation
        else:
            assert catalog.gettext(msgid) == translation


def test_gettext_system_pivot_zh_ja() -> None:
    if not list((LOCALE / "zh_CN" / "LC_MESSAGES").glob("*.mo")):
        pytest.skip(f"no zh_CN gettext catalogs in {LOCALE}")
    if not list((LOCALE / "ja" / "LC_MESSAGES").glob("*.mo")):
        pytest.skip(f"no Japanese gettext catalogs in {LOCALE}")
    pairs, stats = run(GettextSource.from_dict({"src": "zh", "tgt": "ja"}))
    assert len(pairs) == stats["gettext.pairs"] >= 1_000
    if (LOCALE / "zh_CN/LC_MESSAGES/sed.mo").is_file() and (
        LOCALE / "ja/LC_MESSAGES/sed.mo"
    ).is_file():
        assert ("遗漏命令", "コマンドが足りません") in pairs


# ---------------------------------------------------------------- url


class LoopbackServer:
    """Serves ``files`` (path -> bytes) on 127.0.0.1 with Range support; records requests."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: certificate and key files; the server then speaks https."""
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}  # path -> address of a 302
        self.requests: list[tuple[str, str | None]] = []
        self.cuts: dict[str, list[int]] = {}  # path -> bytes sent before hanging up, per request
        self.ignore_range = False
        self.unsized: set[str] = set()  # paths answered as HTTP/1.0 does: no length, no chunks
        state = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                state.requests.append((self.path, self.headers.get("Range")))
                if self.path in state.redirects:
                    self.send_response(302)
                    self.send_header("Location", state.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = state.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                start = int(asked.group(1)) if asked and not state.ignore_range else 0
                if start >= len(body) > 0:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                if self.path not in state.unsized:
                    self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                cuts = state.cuts.get(self.path)
                cut = cuts.pop(0) if cuts else None
                self.wfile.write(body[start:] if cut is None else body[start : start + cut])
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server(monkeypatch, enja):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    httpd = LoopbackServer()
    for lang, lines in zip(("en", "ja"), enja, strict=True):
        httpd.files[f"/c.{lang}"] = "".join(f"{line}\n" for line in lines).encode("utf-8")
    yield httpd
    httpd.close()


def url_source(server, tmp_path, **extra) -> UrlSource:
    """/c.en and /c.ja, pinned to their sha256."""
    files = {
        lang: {"url": server.url(path), "sha256": hashlib.sha256(server.files[path]).hexdigest()}
        for lang, path in (("en", "/c.en"), ("ja", "/c.ja"))
    }
    config = {"files": files, "cache_dir": str(tmp_path / "cache"), "backoff": 0} | extra
    return UrlSource.from_dict(config)


def test_url_downloads_once_then_reads_the_cache(server, tmp_path, enja) -> None:
    pairs, stats = run(url_source(server, tmp_path))
    assert pairs == list(zip(*enja, strict=True))
    assert len(server.requests) == 2 and stats["url.downloads"] == 2
    again, stats = run(url_source(server, tmp_path))
    assert again == pairs
    assert len(server.requests) == 2  # no request at all for a cached file
    assert stats["url.cache_hits"] == 2
    assert sorted(p.name for p in (tmp_path / "cache").glob("*.part")) == []


RESUME_CASES = [
    # the first response stops after 1000 bytes: the next request asks for the rest
    pytest.param(None, 1000, False, [None, "bytes=1000-"], id="cut-then-resume"),
    # a .part left by an earlier run is resumed at once
    pytest.param("prefix", None, False, ["bytes=700-"], id="earlier-part"),
    # the server ignores Range and sends 200: the stale .part (garbage) is replaced, not appended
    pytest.param("garbage", None, True, ["bytes=700-"], id="range-ignored"),
    # the .part is already whole (killed before the rename): 416, nothing more to fetch
    pytest.param("whole", None, False, ["bytes={n}-"], id="part-complete"),
    # a .part longer than the file (the file changed upstream): 416, restart from zero
    pytest.param("longer", None, False, ["bytes={m}-", None], id="part-too-long"),
]


@pytest.mark.parametrize(("part", "cut", "ignore_range", "ranges"), RESUME_CASES)
def test_url_resume(server, tmp_path, part, cut, ignore_range, ranges) -> None:
    body = server.files["/c.ja"]
    source = url_source(server, tmp_path, retries=2)
    spec = source.config.files["ja"]
    cache = tmp_path / "cache"
    cache.mkdir()
    parts = {"prefix": body[:700], "garbage": b"x" * 700, "whole": body, "longer": body + b"x" * 9}
    prefix = parts.get(part)
    if prefix is not None:
        (cache / f"{spec.key()}.part").write_bytes(prefix)
    if cut is not None:
        server.cuts["/c.ja"] = [cut]
    server.ignore_range = ignore_range
    pairs, stats = run(source)
    assert (cache / spec.cached_name()).read_bytes() == body
    asked = [r for path, r in server.requests if path == "/c.ja"]
    assert asked == [r and r.format(n=len(body), m=len(body) + 9) for r in ranges]
    assert len(pairs) == 40
    assert stats["url.resumed"] == (1 if part == "prefix" or cut else 0)


def test_url_sha256_mismatch_deletes_the_download(server, tmp_path) -> None:
    wrong = "0" * 64
    source = UrlSource.from_dict(
        {"files": {"en": {"url": server.url("/c.en"), "sha256": wrong}}, "cache_dir": str(tmp_path)}
    )
    actual = hashlib.sha256(server.files["/c.en"]).hexdigest()
    with pytest.raises(DataError) as caught:
        run(source)
    message = str(caught.value)
    assert server.url("/c.en") in message and wrong in message and actual in message
    assert list(tmp_path.glob(f"{wrong}*")) == [tmp_path / f"{wrong}.lock"]


def test_url_http_error_is_not_retried(server, tmp_path) -> None:
    source = UrlSource.from_dict(
        {"files": {"en": {"url": server.url("/missing.en")}}, "cache_dir": str(tmp_path)}
    )
    with pytest.raises(DataError, match=r"/missing\.en: HTTP 404"):
        run(source)
    assert len(server.requests) == 1


def test_a_failed_download_names_the_data_entry_and_address(server, tmp_path) -> None:
    """A paper profile fetches thirty corpora: a 404 says which data entry and which address."""
    from click.testing import CliRunner

    from mtcore.cli.app import cli

    document = {
        "name": "t",
        "data": {
            "wikititles": {
                "source": "url",
                "files": {
                    "en": {"url": server.url("/missing.en")},
                    "ja": {"url": server.url("/c.ja")},
                },
                "cache_dir": str(tmp_path / "cache"),
            }
        },
        "steps": {},
    }
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(document), encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(recipe), "-w", str(tmp_path / "w")], obj={})
    assert result.exit_code != 0
    assert (
        f"data entry 'wikititles' (source url): {server.url('/missing.en')}: HTTP 404"
        in " ".join(result.output.split())
    ), result.output


def test_url_gives_up_after_retries_and_keeps_the_part(server, tmp_path) -> None:
    server.files["/big.en"] = b"line\n" * 1000
    source = UrlSource.from_dict(
        {
            "files": {"en": {"url": server.url("/big.en")}},
            "cache_dir": str(tmp_path),
            "retries": 1,
            "backoff": 0,
        }
    )
    server.cuts["/big.en"] = [100, 100]  # hang up on both attempts
    with pytest.raises(DataError, match=r"failed after 2 attempts.*resumes from it"):
        run(source)
    assert len(server.requests) == 2
    assert (tmp_path / f"{FileSpec(url=server.url('/big.en')).key()}.part").stat().st_size == 200


def test_url_gzip_tsv_and_unpinned_hash_warning(server, tmp_path, enja, caplog) -> None:
    rows = "".join(f"{e}\t{j}\n" for e, j in zip(*enja, strict=True)).encode("utf-8")
    server.files["/c.tsv.gz"] = gzip.compress(rows)
    server.files["/export?format=gzip"] = gzip.compress(rows)
    cache = str(tmp_path)
    by_suffix = {"tsv": {"url": server.url("/c.tsv.gz")}, "columns": {"ja": 1, "en": 0}}
    by_setting = {"tsv": {"url": server.url("/export?format=gzip"), "compression": "gz"}}
    with caplog.at_level(logging.WARNING, logger="mtcore.sources.url"):
        pairs = run(UrlSource.from_dict(by_suffix | {"cache_dir": cache}))[0]
    assert pairs == [(j, e) for e, j in zip(*enja, strict=True)]
    actual = hashlib.sha256(server.files["/c.tsv.gz"]).hexdigest()
    assert f"set sha256: {actual}" in caplog.text
    config = by_setting | {"columns": {"en": 0}, "cache_dir": cache}
    assert run(UrlSource.from_dict(config))[0] == [(e,) for e in enja[0]]


def test_url_read_errors_name_the_url(server, tmp_path) -> None:
    server.files["/bad.ja"] = b"ok\n\xff\n"
    source = UrlSource.from_dict(
        {"files": {"ja": {"url": server.url("/bad.ja")}}, "cache_dir": str(tmp_path)}
    )
    with pytest.raises(DataError, match=r":2: invalid UTF-8.* is http://127\.0\.0\.1:\d+/bad\.ja"):
        run(source)


def fetch_step(tmp_path, source: str, config: dict) -> tuple[Path, dict]:
    """The fetch step of a data entry run outside a recipe: its corpus folder and counts."""
    from mtcore.contracts.step import StepContext
    from mtcore_plugins.executors.local import LocalExecutor
    from mtcore_plugins.steps.fetch import FetchStep

    ctx = StepContext(
        step_id="data",
        kind="fetch",
        step_hash="test",
        work=tmp_path / "step",
        inputs={},
        executor=LocalExecutor.from_dict({"workers": 1}),
        registry=load_registry(),
        show_progress=False,
    )
    FetchStep.from_dict({"source": source, "config": config}).run(ctx)
    return tmp_path / "step" / "corpus", ctx.stats.as_dict()


def test_url_files_are_read_in_blocks_and_errors_name_the_url(server, tmp_path, enja) -> None:
    """A downloaded pair of line files goes through the sharded reader: the cache file's bytes
    as they are, and an error names both the cache file and the address."""
    corpus, counts = fetch_step(
        tmp_path / "a", "url", url_source(server, tmp_path).config.model_dump()
    )
    for lang, lines in zip(("en", "ja"), enja, strict=True):
        assert (corpus / f"corpus.{lang}").read_text(encoding="utf-8").splitlines() == lines
    assert counts["pairs_out"] == len(enja[0])
    server.files["/bad.ja"] = b"ok\n\xff\n"
    server.files["/bad.en"] = b"ok\nyes\n"
    config = {
        "files": {lang: {"url": server.url(f"/bad.{lang}")} for lang in ("en", "ja")},
        "cache_dir": str(tmp_path / "cache"),
    }
    with pytest.raises(DataError, match=r":2: invalid UTF-8.* is http://127\.0\.0\.1:\d+/bad\.ja"):
        fetch_step(tmp_path / "b", "url", config)


def test_url_fingerprint_is_pin_or_url_and_offline() -> None:
    sha = "AB" * 32
    source = UrlSource.from_dict(
        {
            "files": {
                "en": {"url": "http://127.0.0.1:9/a.en", "sha256": sha},
                "ja": {"url": "http://127.0.0.1:9/a.ja"},
            }
        }
    )
    assert source.fingerprint() == f'["{sha.lower()}", "http://127.0.0.1:9/a.ja"]'
    assert source.langs() == ("en", "ja")


URL_BAD_CONFIGS = [
    # only http and https are fetched
    ({"files": {"en": {"url": "ftp://127.0.0.1/a"}}}, "String should match pattern"),
    # a sha256 is 64 hex digits
    ({"files": {"en": {"url": "http://127.0.0.1/a", "sha256": "abc"}}}, "String should match"),
    # both forms at once
    (
        {"files": {"en": {"url": "http://127.0.0.1/a"}}, "tsv": {"url": "http://127.0.0.1/b"}},
        "exactly one",
    ),
    # tsv without columns
    ({"tsv": {"url": "http://127.0.0.1/b"}}, "give both"),
    # unknown compression
    (
        {"files": {"en": {"url": "http://127.0.0.1/a", "compression": "bz2"}}},
        "'auto', 'none', 'gz' or 'xz'",
    ),
]


@pytest.mark.parametrize(("config", "message"), URL_BAD_CONFIGS)
def test_url_config_errors(config, message) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        UrlSource.from_dict(config)


def test_url_default_cache_follows_environment(monkeypatch, tmp_path) -> None:
    from mtcore_plugins.sources.url import default_cache

    monkeypatch.setenv("MTCORE_CACHE", str(tmp_path))
    assert default_cache() == tmp_path / "downloads"
    monkeypatch.delenv("MTCORE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache() == tmp_path / "xdg" / "mtcore" / "downloads"

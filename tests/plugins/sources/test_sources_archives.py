"""Archive members (tar, tar.gz/tgz, tar.xz, zip), .gz/.xz files and multi-column TSV members,
read through the ``local`` and ``url`` sources, built from real lines of ../shared/data."""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from mtcore.contracts.errors import DataError
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import InputPolicy
from mtcore_plugins.sources.local import LocalSource
from mtcore_plugins.sources.url import UrlSource
from tests.plugins.sources.test_sources import LoopbackServer
from tests.support.data import SHARED

NEWS = SHARED / "en-ja" / "Helsinki-NLP+OPUS-MT-testsets" / "testsets" / "eng-jpn" / "newstest2021"
KINDS = ["kftt.tar", "kftt.tar.gz", "kftt.tgz", "kftt.tar.xz", "kftt.zip"]


def real_lines(suffix: str, n: int, start: int = 0) -> list[str]:
    """Lines ``start``..``start + n`` of newstest2021 (raw English or Japanese)."""
    path = NEWS.with_name(f"{NEWS.name}.{suffix}")
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path.read_text(encoding="utf-8").split("\n")[start : start + n]


def text(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def make_archive(path: Path, files: dict[str, bytes]) -> Path:
    """A tar (compressed as the name says) or zip with ``files`` and a directory entry."""
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("kftt-data-1.0/", b"")
            for name, body in files.items():
                archive.writestr(name, body)
        return path
    compression = {".gz": "gz", ".tgz": "gz", ".xz": "xz"}.get(path.suffix, "")
    with tarfile.open(path, f"w:{compression}") as archive:
        directory = tarfile.TarInfo("kftt-data-1.0")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return path


def run(source, policy: InputPolicy | None = None) -> tuple[list[tuple[str, ...]], Stats]:
    stats = Stats()
    return list(source.read(policy or InputPolicy(), stats)), stats


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch) -> Path:
    """Member lists and content hashes go to a cache of the test's own."""
    monkeypatch.setenv("MTCORE_CACHE", str(tmp_path / "mtcore-cache"))
    return tmp_path / "mtcore-cache"


@pytest.fixture
def enja() -> tuple[list[str], list[str]]:
    return real_lines("eng", 120), real_lines("jpn", 120)


@pytest.fixture
def kftt(enja) -> dict[str, bytes]:
    """KFTT's layout: kftt-data-1.0/data/orig/kyoto-{train,dev}.{en,ja} and a README."""
    en, ja = enja
    return {
        "kftt-data-1.0/README.txt": b"Kyoto Free Translation Task\n",
        "kftt-data-1.0/data/orig/kyoto-train.en": text(en[:100]),
        "kftt-data-1.0/data/orig/kyoto-train.ja": text(ja[:100]),
        "kftt-data-1.0/data/orig/kyoto-dev.en": text(en[100:]),
        "kftt-data-1.0/data/orig/kyoto-dev.ja": text(ja[100:]),
    }


def moses(archive: Path, split: str = "train") -> LocalSource:
    member = {"en": f"*/kyoto-{split}.en", "ja": f"*/orig/kyoto-{split}.ja"}
    return LocalSource.from_dict({"archive": str(archive), "member": member})


@pytest.mark.parametrize("name", KINDS)
def test_local_reads_one_member_per_language(tmp_path, kftt, enja, name) -> None:
    archive = make_archive(tmp_path / name, kftt)
    source = moses(archive)
    pairs, _ = run(source)
    assert source.langs() == ("en", "ja")
    assert pairs == list(zip(enja[0][:100], enja[1][:100], strict=True))
    assert any(re.search(r"[\u3040-\u30ff]", ja) for _, ja in pairs)  # raw Japanese came through
    assert run(moses(archive, "dev"))[0] == list(zip(enja[0][100:], enja[1][100:], strict=True))


def test_member_list_is_remembered_by_content(tmp_path, kftt, cache_home) -> None:
    archive = make_archive(tmp_path / "kftt.tar.gz", kftt)
    run(moses(archive))
    (listed,) = (cache_home / "archives").glob("*.json")
    assert "kftt-data-1.0/data/orig/kyoto-train.ja" in listed.read_text(encoding="utf-8")
    # the remembered list is what resolves patterns: a member it lacks is "not found"
    listed.write_text('["kftt-data-1.0/README.txt"]', encoding="utf-8")
    with pytest.raises(DataError, match="no member matches"):
        run(moses(archive))


def test_gz_member_and_plain_xz_files(tmp_path, enja) -> None:
    en, ja = (lines[:50] for lines in enja)
    archive = make_archive(
        tmp_path / "c.tar", {"c/train.en.gz": gzip.compress(text(en)), "c/train.ja": text(ja)}
    )
    source = LocalSource.from_dict(
        {"archive": str(archive), "member": {"en": "*.en.gz", "ja": "*.ja"}}
    )
    assert run(source)[0] == list(zip(en, ja, strict=True))
    (tmp_path / "c.en.xz").write_bytes(lzma.compress(text(en)))
    (tmp_path / "c.ja.gz").write_bytes(gzip.compress(text(ja)))
    files = {"en": str(tmp_path / "c.en.xz"), "ja": str(tmp_path / "c.ja.gz")}
    assert run(LocalSource.from_dict({"files": files}))[0] == list(zip(en, ja, strict=True))


def jparacrawl(enja, bad: dict[int, str] | None = None) -> bytes:
    """JParaCrawl v3's en-ja.bicleaner05.txt layout: domain, domain, score, en, ja."""
    rows = [
        f"www.example{i % 7}.jp\twww.example{i % 7}.jp\t0.{700 + i}\t{en}\t{ja}"
        for i, (en, ja) in enumerate(zip(*enja, strict=True))
    ]
    for index, row in (bad or {}).items():
        rows[index] = row
    return text(rows)


def test_jparacrawl_columns_from_a_tar_member(tmp_path, enja) -> None:
    archive = make_archive(
        tmp_path / "en-ja.tar.gz", {"en-ja/en-ja.bicleaner05.txt": jparacrawl(enja)}
    )
    config = {
        "archive": str(archive),
        "member": "en-ja/en-ja.bicleaner05.txt",
        "columns": {"en": 3, "ja": 4},
    }
    source = LocalSource.from_dict(config)
    assert source.langs() == ("en", "ja")
    assert run(source)[0] == list(zip(*enja, strict=True))
    swapped = LocalSource.from_dict(config | {"columns": {"ja": 4, "en": 3}})
    assert run(swapped)[0] == list(zip(enja[1], enja[0], strict=True))


def test_member_path_matches_a_dot_slash_tar(tmp_path, enja) -> None:
    """``tar -C dir .`` names members ./en-ja/...: the path as the user writes it still finds it."""
    body = jparacrawl(enja)
    archive = make_archive(tmp_path / "en-ja.tar.gz", {"./en-ja/en-ja.bicleaner05.txt": body})
    config = {"member": "en-ja/en-ja.bicleaner05.txt", "columns": {"en": 3, "ja": 4}}
    source = LocalSource.from_dict({"archive": str(archive)} | config)
    assert run(source)[0] == list(zip(*enja, strict=True))


def test_tab_inside_a_segment_is_a_policy_rule(tmp_path, enja) -> None:
    """Line 8 has a tab inside its English side: its columns shift. Once accepted silently."""
    en, ja = enja
    bad = {7: f"www.a.jp\twww.a.jp\t0.9\t{en[7][:20]}\t{en[7][20:]}\t{ja[7]}"}
    archive = make_archive(
        tmp_path / "en-ja.tar.gz", {"en-ja/en-ja.bicleaner05.txt": jparacrawl(enja, bad)}
    )
    source = LocalSource.from_dict(
        {"archive": str(archive), "member": "*/*.txt", "columns": {"en": 3, "ja": 4}}
    )
    where = re.escape(f"{archive}!en-ja/en-ja.bicleaner05.txt:8: 6 tab-separated fields")
    with pytest.raises(DataError, match=where + r".*line 1 has 5.*input\.field_count: drop"):
        run(source)
    pairs, stats = run(source, InputPolicy(field_count="drop"))
    assert stats["input.field_count_dropped"] == 1
    assert pairs == [p for i, p in enumerate(zip(en, ja, strict=True)) if i != 7]
    # the same rule for a plain file, and for a line with too few fields
    plain = tmp_path / "c.tsv"
    plain.write_bytes(text([f"{e}\t{j}" for e, j in zip(en[:5], ja[:5], strict=True)] + [en[5]]))
    local = LocalSource.from_dict({"tsv": str(plain), "columns": {"en": 0, "ja": 1}})
    with pytest.raises(DataError, match=r"c\.tsv:6: expected at least 2 tab-separated"):
        run(local)
    assert run(local, InputPolicy(field_count="drop"))[1]["input.field_count_dropped"] == 1


BAD_ARCHIVES = [
    # the pattern names no member: the error lists what the archive holds
    (
        {"en": "*/kyoto-test.en", "ja": "*/kyoto-dev.ja"},
        r"no member matches '\*/kyoto-test\.en' \(member\.en\); the archive holds 5 files: "
        r"'kftt-data-1\.0/README\.txt'",
    ),
    # a glob matching two members is never resolved by picking one
    (
        {"en": "*.en", "ja": "*/kyoto-dev.ja"},
        r"2 members match '\*\.en' \(member\.en\): 'kftt-data-1\.0/data/orig/kyoto-train\.en', "
        r"'kftt-data-1\.0/data/orig/kyoto-dev\.en'",
    ),
    # Moses members of different lengths: the error names both members
    (
        {"en": "*/kyoto-train.en", "ja": "*/kyoto-dev.ja"},
        r"kftt\.tar\.xz!kftt-data-1\.0/data/orig/kyoto-dev\.ja has 20 lines but "
        r"\S+kftt\.tar\.xz!kftt-data-1\.0/data/orig/kyoto-train\.en has more",
    ),
]


@pytest.mark.parametrize(("member", "message"), BAD_ARCHIVES)
def test_bad_members_are_errors(tmp_path, kftt, member, message) -> None:
    archive = make_archive(tmp_path / "kftt.tar.xz", kftt)
    with pytest.raises(DataError, match=message):
        run(LocalSource.from_dict({"archive": str(archive), "member": member}))


def test_input_policy_names_archive_member_and_line(tmp_path, kftt) -> None:
    kftt["kftt-data-1.0/data/orig/kyoto-dev.ja"] = b"ok\nok\n\xff\xfe bad\n"
    kftt["kftt-data-1.0/data/orig/kyoto-dev.en"] = b"a\r\nb\r\nc\r\n"
    archive = make_archive(tmp_path / "kftt.zip", kftt)
    with pytest.raises(
        DataError,
        match=re.escape(f"{archive}!kftt-data-1.0/data/orig/kyoto-dev.ja:3: invalid UTF-8"),
    ):
        run(moses(archive, "dev"))
    pairs, stats = run(moses(archive, "dev"), InputPolicy(invalid_utf8="drop"))
    assert pairs == [("a", "ok"), ("b", "ok")]
    assert stats["input.crlf_stripped"] == 3 and stats["input.invalid_utf8_dropped"] == 1


def test_truncated_files_are_errors_never_a_short_corpus(tmp_path, enja) -> None:
    whole = gzip.compress(text(enja[0]) * 40)
    (tmp_path / "c.en.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "c.ja").write_bytes(text(enja[1]) * 40)
    files = {"en": str(tmp_path / "c.en.gz"), "ja": str(tmp_path / "c.ja")}
    with pytest.raises(
        DataError, match=r"c\.en\.gz:\d+: cannot be read after line \d+, the file is truncated"
    ):
        run(LocalSource.from_dict({"files": files}))
    archive = tmp_path / "en-ja.tar.gz"
    make_archive(archive, {"en-ja/en-ja.bicleaner05.txt": jparacrawl(enja) * 40})
    archive.write_bytes(archive.read_bytes()[:-2000])
    config = {"archive": str(archive), "member": "*/*.txt", "columns": {"en": 3, "ja": 4}}
    with pytest.raises(DataError, match=re.escape(str(archive)) + r".*(truncated|corrupt)"):
        run(LocalSource.from_dict(config))


def test_a_compressed_file_is_not_an_archive(tmp_path, enja) -> None:
    (tmp_path / "c.en.gz").write_bytes(gzip.compress(text(enja[0])))
    source = LocalSource.from_dict({"archive": str(tmp_path / "c.en.gz"), "member": {"en": "*"}})
    with pytest.raises(
        DataError, match=r"c\.en\.gz: not a tar or zip archive .* is read with files: or tsv:"
    ):
        run(source)


def test_a_corrupt_zip_member_is_an_error_naming_it(tmp_path, kftt) -> None:
    for lang in ("en", "ja"):
        kftt[f"kftt-data-1.0/data/orig/kyoto-train.{lang}"] *= 50
    archive = make_archive(tmp_path / "kftt.zip", kftt)
    body = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as handle:
        info = handle.getinfo("kftt-data-1.0/data/orig/kyoto-train.ja")
    middle = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
    body[middle] ^= 0xFF
    archive.write_bytes(bytes(body))
    where = re.escape(f"{archive}!kftt-data-1.0/data/orig/kyoto-train.ja:")
    with pytest.raises(DataError, match=where + r"\d+: invalid UTF-8"):
        run(moses(archive))
    # bytes that decode still fail the member's CRC (or the deflate stream) before its end
    with pytest.raises(DataError, match=where + r"\d+: cannot be read after line \d+"):
        run(
            LocalSource.from_dict({"archive": str(archive), "member": {"ja": "*/kyoto-train.ja"}}),
            InputPolicy(invalid_utf8="replace", inner_breaks="space"),
        )


# ---------------------------------------------------------------- url


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    httpd = LoopbackServer()
    yield httpd
    httpd.close()


def served(server, tmp_path, path: str, body: bytes, **config) -> UrlSource:
    server.files[path] = body
    spec = {"url": server.url(path), "sha256": hashlib.sha256(body).hexdigest()}
    return UrlSource.from_dict(
        {"archive": spec, "cache_dir": str(tmp_path / "downloads"), "backoff": 0} | config
    )


@pytest.mark.parametrize("name", ["kftt-data-1.0.tar.gz", "kftt-data-1.0.zip"])
def test_url_archive_is_downloaded_once_for_every_member(server, tmp_path, kftt, enja, name):
    body = make_archive(tmp_path / name, kftt).read_bytes()
    member = {"en": "*/kyoto-train.en", "ja": "*/kyoto-train.ja"}
    pairs, stats = run(served(server, tmp_path, f"/{name}", body, member=member))
    assert pairs == list(zip(enja[0][:100], enja[1][:100], strict=True))
    assert stats["url.downloads"] == 1 and len(server.requests) == 1
    # another member of the same archive: read from the cache, nothing downloaded
    dev = {"en": "*/kyoto-dev.en", "ja": "*/kyoto-dev.ja"}
    pairs, stats = run(served(server, tmp_path, f"/{name}", body, member=dev))
    assert pairs == list(zip(enja[0][100:], enja[1][100:], strict=True))
    assert stats["url.cache_hits"] == 1 and len(server.requests) == 1


def test_url_resumes_an_archive_and_reads_its_tsv_member(server, tmp_path, enja) -> None:
    body = make_archive(
        tmp_path / "en-ja.tar.gz", {"en-ja/en-ja.bicleaner05.txt": jparacrawl(enja)}
    ).read_bytes()
    server.cuts["/release/3.0/bitext/en-ja.tar.gz"] = [len(body) // 3]
    config = {"member": "en-ja/en-ja.bicleaner05.txt", "columns": {"en": 3, "ja": 4}}
    source = served(server, tmp_path, "/release/3.0/bitext/en-ja.tar.gz", body, **config)
    pairs, stats = run(source)
    assert pairs == list(zip(*enja, strict=True))
    assert stats["url.resumed"] == 1 and server.requests[1][1] == f"bytes={len(body) // 3}-"


def test_url_truncated_archive_names_the_url(server, tmp_path, kftt) -> None:
    body = make_archive(tmp_path / "k.tar.gz", kftt).read_bytes()
    server.files["/k.tar.gz"] = body[: len(body) - 100]
    source = UrlSource.from_dict(
        {
            "archive": {"url": server.url("/k.tar.gz")},
            "member": {"en": "*/kyoto-train.en", "ja": "*/kyoto-train.ja"},
            "cache_dir": str(tmp_path / "downloads"),
        }
    )
    with pytest.raises(
        DataError, match=r"truncated or corrupt.* is http://127\.0\.0\.1:\d+/k\.tar\.gz"
    ):
        run(source)


LOCAL_BAD = [
    # archive without member
    ({"archive": "a.tgz"}, "archive + member also needs member"),
    # member without archive
    ({"files": {"en": "a"}, "member": {"en": "x"}}, "member names files inside an archive"),
    # one member needs columns or langs to say how it is laid out
    ({"archive": "a.tgz", "member": "x.txt"}, "needs columns: {lang: column} (a TSV member)"),
    # columns mean nothing for one member per language
    ({"archive": "a.tgz", "member": {"en": "x"}, "columns": {"en": 0}}, "columns does not apply"),
    # a separator applies to a TSV member only
    ({"archive": "a.tgz", "member": {"en": "x"}, "separator": "|"}, "separator applies to a tsv"),
    # format is for one file per language
    ({"tsv": "a", "columns": {"en": 0}, "format": "sgm"}, "format does not apply to tsv"),
    # a translator is for WMT XML only
    ({"files": {"en": "a"}, "translator": "A"}, "translator does not apply to files"),
    # two forms
    ({"archive": "a.tgz", "member": {"en": "x"}, "xml": "b"}, "got xml + langs and archive"),
]


@pytest.mark.parametrize(("config", "message"), LOCAL_BAD)
def test_archive_config_errors(config, message) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        LocalSource.from_dict(config)
    if "files" in config or "archive" not in config:
        return
    config = config | {"archive": {"url": "http://127.0.0.1:9/a.tgz"}}
    if "xml" in config:
        config["xml"] = {"url": "http://127.0.0.1:9/b.xml"}
    with pytest.raises(ValidationError, match=re.escape(message)):
        UrlSource.from_dict(config)


def test_url_xz_files_are_decompressed_by_their_name(server, tmp_path, enja) -> None:
    files = {}
    for lang, lines in zip(("en", "ja"), enja, strict=True):
        server.files[f"/news.{lang}.xz"] = lzma.compress(text(lines))
        files[lang] = {"url": server.url(f"/news.{lang}.xz")}
    source = UrlSource.from_dict({"files": files, "cache_dir": str(tmp_path / "downloads")})
    assert run(source)[0] == list(zip(*enja, strict=True))
    assert sorted(p.name[64:] for p in (tmp_path / "downloads").glob("*.xz")) == [".xz", ".xz"]

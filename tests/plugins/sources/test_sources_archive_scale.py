"""Archive reading at size (a 256 MB member streams in flat memory) and the fetch step's
identity (new settings hash only when set, so existing caches stay valid)."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from mtcore.contracts.registry import Registry
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import InputPolicy
from mtcore.recipe.load import _short_source, build_recipe
from mtcore.run.runner import Runner
from mtcore_plugins.sources.local import LocalSource
from tests.support import ROOT
from tests.support.data import SHARED, clean_split_recipe

NEWS = SHARED / "en-ja" / "Helsinki-NLP+OPUS-MT-testsets" / "testsets" / "eng-jpn" / "newstest2021"
MEMBER_BYTES = 256 << 20


def rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Repeated(io.RawIOBase):
    """``size`` bytes of ``block`` over and over, made as they are read (never held whole)."""

    def __init__(self, block: bytes, size: int) -> None:
        self.block, self.left, self.at = block, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        n = min(len(buffer), self.left, len(self.block) - self.at)
        buffer[:n] = self.block[self.at : self.at + n]
        self.at = (self.at + n) % len(self.block)
        self.left -= n
        return n


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc for RSS")
def test_a_large_member_streams_in_flat_memory(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MTCORE_CACHE", str(tmp_path / "cache"))
    en = NEWS.with_name("newstest2021.eng")
    ja = NEWS.with_name("newstest2021.jpn")
    if not en.is_file():
        pytest.skip(f"{en} not available")
    rows = zip(en.read_text("utf-8").splitlines(), ja.read_text("utf-8").splitlines(), strict=True)
    block = "".join(f"d.jp\td.jp\t0.8\t{e}\t{j}\n" for e, j in rows).encode("utf-8")
    size = MEMBER_BYTES - MEMBER_BYTES % len(block)
    archive = tmp_path / "en-ja.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("en-ja/en-ja.bicleaner05.txt")
        info.size = size
        tar.addfile(info, io.BufferedReader(Repeated(block, size), 1 << 20))
    config = {"archive": str(archive), "member": "*/*.txt", "columns": {"en": 3, "ja": 4}}
    pairs = LocalSource.from_dict(config).read(InputPolicy(), Stats())
    start = peak = rss()
    count = 0
    for count, _ in enumerate(pairs, start=1):
        if count % 50_000 == 0:
            peak = max(peak, rss())
    assert count == size // len(block) * 1000
    assert peak - start < 32 << 20, (
        f"RSS grew {(peak - start) >> 20} MB over a {size >> 20} MB member"
    )


def fetch_identity(registry: Registry, config: dict, **step) -> dict:
    fetch = registry.load("steps", "fetch").from_dict({"source": "local", "config": config, **step})
    return fetch.identity(registry)


def test_new_settings_hash_only_when_set(registry, tmp_path) -> None:
    plain = fetch_identity(registry, {"files": {"en": "a.en", "ja": "a.ja"}})
    # exactly the keys the source and the policy had before archives: cached steps stay valid
    assert sorted(plain["config"]) == [
        "columns",
        "dir",
        "files",
        "langs",
        "prefix",
        "separator",
        "tsv",
    ]
    assert "field_count" not in plain["input"]
    dropping = fetch_identity(
        registry, {"files": {"en": "a.en", "ja": "a.ja"}}, input={"field_count": "drop"}
    )
    assert dropping["input"]["field_count"] == "drop"
    moses = {"archive": "k.tgz", "member": {"en": "*/train.en", "ja": "*/train.ja"}}
    train = fetch_identity(registry, moses)
    assert train["config"]["member"] == moses["member"] and "format" not in train["config"]
    dev = fetch_identity(registry, moses | {"member": {"en": "*/dev.en", "ja": "*/dev.ja"}})
    assert dev != train


def test_the_documented_examples_validate(registry) -> None:
    """Every data entry in docs/data.md's YAML blocks is a valid source config."""
    page = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    entries = {}
    for block in re.findall(r"```yaml\n(.*?)```", page, re.DOTALL):
        document = yaml.safe_load(block)
        entries |= document.get("data", document)
    assert {"jparacrawl", "kftt", "ted", "wmt20", "wmt21", "wmt22_local"} <= set(entries)
    assert {"news_commentary", "wmt22_enja", "flores_devtest"} <= set(entries)  # ids, too
    for name, written in entries.items():
        entry = written if "source" in written else _short_source(written, registry)
        settings = {k: v for k, v in entry.items() if k not in ("source", "input")}
        source = registry.load("sources", entry["source"]).from_dict(settings)
        assert source.langs(), name


def test_a_run_counts_archive_drops_in_the_fetch_manifest(tmp_path, registry) -> None:
    """Through the runner: a JParaCrawl-layout member with one stray tab, dropped and counted in
    the fetch step's manifest."""
    en, ja = (NEWS.with_name(f"newstest2021.{s}") for s in ("eng", "jpn"))
    if not en.is_file():
        pytest.skip(f"{en} not available")
    rows = [
        f"d.jp\td.jp\t0.8\t{e}\t{j}"
        for e, j in zip(
            en.read_text("utf-8").splitlines(), ja.read_text("utf-8").splitlines(), strict=True
        )
    ][:300]
    rows[41] = rows[41].replace(" ", "\t", 1)  # a tab inside the English side
    member = ("\n".join(rows) + "\n").encode("utf-8")
    archive = tmp_path / "en-ja.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("en-ja/en-ja.bicleaner05.txt")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    doc = clean_split_recipe("archive", {"en": "x.en", "ja": "x.ja"}, [{"name": "dedup"}], 20)
    doc["data"]["bitext"] = {
        "source": "local",
        "archive": str(archive),
        "member": "*/en-ja.bicleaner05.txt",
        "columns": {"en": 3, "ja": 4},
        "input": {"field_count": "drop"},
    }
    recipe = build_recipe(doc, registry)
    result = Runner(recipe, registry, tmp_path / "w", show_progress=False).run(until="bitext")
    counts = result.manifest("bitext")["counts"]
    assert counts["pairs_out"] == 299 and counts["input.field_count_dropped"] == 1

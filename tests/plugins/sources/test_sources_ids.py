"""Corpora by id: mtdata's index and sacrebleu's test sets resolve offline to the url source's
layout; a recipe names them in short or long form; `mtcore datasets` lists them; a download by
id goes through the url source (mirror, lock file) and reads what the index says."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.errors import DataError, RecipeError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import Corpus
from mtcore.recipe.load import load_recipe
from mtcore.recipe.plan import make_plan
from mtcore_plugins.common.hub import mirror as _mirror
from mtcore_plugins.sources._index import mtdata_index, mtdata_settings, sacrebleu_resolve
from mtcore_plugins.sources.indexed import (
    FloresSource,
    MtdataSource,
    NtrexSource,
    OpusSource,
    SacrebleuSource,
)
from tests.plugins.sources.test_sources import LoopbackServer
from tests.support.data import ENJA, clean_split_recipe

# (id, languages, the url source's settings) as mtdata 0.5.1's index describes them: one of
# each layout mtcore reads.
MTDATA = [
    (
        "Statmt-news_commentary-16-eng-jpn",
        ("en", "ja"),
        {
            "tsv": {"url": "http://data.statmt.org/news-commentary/v16/training/news-commentary-v16.en-ja.tsv.gz"},
            "columns": {"en": 0, "ja": 1},
        },
    ),
    (
        "KECL-paracrawl-3-eng-jpn",
        ("en", "ja"),
        {
            "archive": {"url": "http://www.kecl.ntt.co.jp/icl/lirg/jparacrawl/release/3.0/bitext/en-ja.tar.gz"},
            "member": "en-ja/en-ja.bicleaner05.txt",
            "columns": {"en": 3, "ja": 4},
        },
    ),
    (
        "Phontron-kftt_train-1-eng-jpn",
        ("en", "ja"),
        {
            "archive": {"url": "http://www.phontron.com/kftt/download/kftt-data-1.0.tar.gz"},
            "member": {
                "en": "kftt-data-1.0/data/orig/kyoto-train.en",
                "ja": "kftt-data-1.0/data/orig/kyoto-train.ja",
            },
        },
    ),
    (
        "Statmt-news_crawl-2021-jpn",
        ("ja",),
        {"files": {"ja": {"url": "https://data.statmt.org/news-crawl/ja/news.2021.ja.shuffled.deduped.gz"}}},
    ),
    (
        "Statmt-newstest_enja-2021-eng-jpn",
        ("en", "ja"),
        {
            "archive": {"url": "http://data.statmt.org/wmt21/translation-task/test.tgz"},
            "member": "test/newstest2021.en-ja.xml",
            "langs": ["en", "ja"],
        },
    ),
    (
        "Statmt-newsdev_jaen-2020-jpn-eng",
        ("ja", "en"),
        {
            "archive": {"url": "http://data.statmt.org/wmt20/translation-task/dev.tgz"},
            "member": {
                "ja": "dev/newsdev2020-jaen-src.ja.sgm",
                "en": "dev/newsdev2020-jaen-ref.en.sgm",
            },
            "format": "sgm",
        },
    ),
    (
        "OPUS-jparacrawl-v3.0-eng-jpn",
        ("en", "ja"),
        {
            "archive": {"url": "https://object.pouta.csc.fi/OPUS-JParaCrawl/v3.0/moses/en-ja.txt.zip"},
            "member": {"en": "*.en", "ja": "*.ja"},
        },
    ),
]  # fmt: skip


@pytest.mark.parametrize(("dataset_id", "langs", "settings"), MTDATA, ids=[m[0] for m in MTDATA])
def test_an_mtdata_id_resolves_to_the_layout_its_index_gives(dataset_id, langs, settings) -> None:
    source = MtdataSource.from_dict({"id": dataset_id})
    assert source.langs() == langs
    assert source.resolved.settings == settings
    assert source.resolved.index == "mtdata 0.5.1"
    # the url source accepts the layout as it is
    assert source.url.langs() == langs


def test_langs_reorder_the_columns_and_change_the_fingerprint() -> None:
    own = MtdataSource.from_dict({"id": "Statmt-wikititles-3-jpn-eng"})
    assert own.langs() == ("ja", "en") and own.resolved.settings["columns"] == {"ja": 0, "en": 1}
    turned = MtdataSource.from_dict({"id": "Statmt-wikititles-3-jpn-eng", "langs": ["en", "ja"]})
    assert turned.langs() == ("en", "ja")
    assert turned.resolved.settings["columns"] == {"en": 1, "ja": 0}
    assert own.fingerprint() != turned.fingerprint()
    assert "mtdata 0.5.1" in own.fingerprint()
    with pytest.raises(ValueError, match=r"langs \['en', 'zh'\] are not this corpus' languages"):
        MtdataSource.from_dict({"id": "Statmt-wikititles-3-jpn-eng", "langs": ["en", "zh"]})


def test_an_unknown_id_lists_the_closest_ids_of_its_pair(tmp_path, write_recipe) -> None:
    doc = clean_split_recipe("typo", {}, [], 5)
    doc["data"] = {"bitext": {"mtdata": "Statmt-news_comentary-16-eng-jpn"}}
    with pytest.raises(RecipeError) as caught:
        load_recipe(write_recipe(doc), load_registry())
    message = str(caught.value)
    assert "data.bitext" in message and "'Statmt-news_comentary-16-eng-jpn' is not an id" in message
    assert "closest ids: Statmt-news_commentary-16-eng-jpn" in message
    assert "mtcore datasets" in message


def test_the_family_sources_find_their_one_id() -> None:
    opus = OpusSource.from_dict({"corpus": "JParaCrawl", "version": "v3.0", "langs": ["ja", "en"]})
    assert opus.resolved.id == "OPUS-jparacrawl-v3.0-eng-jpn" and opus.langs() == ("ja", "en")
    assert opus.resolved.settings["member"] == {"ja": "*.ja", "en": "*.en"}
    flores = FloresSource.from_dict({"split": "devtest", "langs": ["en", "ja"]})
    assert flores.resolved.id == "Flores-flores200_devtest-1-eng-jpn"
    assert flores.resolved.settings["member"] == {
        "en": "flores200_dataset/devtest/eng_Latn.devtest",
        "ja": "flores200_dataset/devtest/jpn_Jpan.devtest",
    }
    # NTREX also has eng_GB and eng_US references: the plain English one is the source
    ntrex = NtrexSource.from_dict({"langs": ["en", "ja"]})
    assert ntrex.resolved.id == "Microsoft-ntrex-128-eng-jpn"
    with pytest.raises(
        ValueError, match=r"no OPUS-jparacrawl-v9 for en-ja; its versions for this pair: v3\.0"
    ):
        OpusSource.from_dict({"corpus": "JParaCrawl", "version": "v9", "langs": ["en", "ja"]})


@pytest.mark.parametrize(
    ("dataset_id", "what"),
    [
        ("Tilde-eesc-2017-bul-deu", "1 tmx member"),
        ("Google-wmt24pp-1-eng-ara_EG", "hfds"),
        ("LangUk-news-1-ukr", "compressed as .bz2"),
    ],
)
def test_a_layout_mtcore_cannot_read_is_a_clear_error(dataset_id, what) -> None:
    record = mtdata_index().row(dataset_id)
    assert record is not None
    with pytest.raises(DataError, match=f"{dataset_id} .*{what}.*which mtcore does not read"):
        mtdata_settings(record)


def test_sacrebleu_test_sets_resolve_with_their_references() -> None:
    wmt22 = sacrebleu_resolve("wmt22", "en-ja")
    assert wmt22.langs == ("en", "ja")
    assert wmt22.settings == {
        "archive": {"url": "https://github.com/wmt-conference/wmt22-news-systems/archive/refs/tags/v1.1.tar.gz"},
        "member": "wmt22-news-systems-1.1/xml/wmttest2022.en-ja.all.xml",
        "langs": ["en", "ja"],
    }  # fmt: skip
    # sacrebleu scores cs-en against translator B: so does the entry, unless told otherwise
    assert sacrebleu_resolve("wmt22", "cs-en").settings["translator"] == "B"
    assert sacrebleu_resolve("wmt22", "cs-en", "A").settings["translator"] == "A"
    wmt20 = sacrebleu_resolve("wmt20", "ja-en")
    assert wmt20.settings["member"] == {
        "ja": "sgm/newstest2020-jaen-src.ja.sgm",
        "en": "sgm/newstest2020-jaen-ref.en.sgm",
    }
    # a test set with two references: the second by position
    two = sacrebleu_resolve("wmt20/tworefs", "de-en", "1")
    assert (
        two.settings["member"]["en"]
        != sacrebleu_resolve("wmt20/tworefs", "de-en").settings["member"]["en"]
    )
    with pytest.raises(DataError, match="give the position of one of its 2 references"):
        sacrebleu_resolve("wmt20/tworefs", "de-en", "2")
    with pytest.raises(DataError, match=r"wmt22 \(sacrebleu 2\.5\.1\) has no en-xx; its pairs"):
        sacrebleu_resolve("wmt22", "en-xx")
    with pytest.raises(DataError, match="closest: wmt22"):
        sacrebleu_resolve("wmt222", "en-ja")


def test_the_short_form_is_the_long_form(write_recipe) -> None:
    """``{mtdata: ID}`` plans the same steps, with the same hashes, as ``{source: mtdata,
    id: ID}``; so do the two forms of a sacrebleu entry."""
    registry = load_registry()
    hashes = []
    for data in (
        {
            "bitext": {"mtdata": "Phontron-kftt_train-1-eng-jpn", "max_pairs": 100},
            "wmt": {"sacrebleu": {"test_set": "wmt20", "langpair": "en-ja"}},
        },
        {
            "bitext": {"source": "mtdata", "id": "Phontron-kftt_train-1-eng-jpn", "max_pairs": 100},
            "wmt": {"source": "sacrebleu", "test_set": "wmt20", "langpair": "en-ja"},
        },
    ):
        doc = clean_split_recipe("short", {}, [], 5)
        doc["data"] = data
        doc["steps"]["clean"]["inputs"] = {"corpus": "bitext"}
        recipe = load_recipe(write_recipe(doc), registry)
        hashes.append({p.spec.id: p.hash for p in make_plan(recipe, registry)})
    assert hashes[0] == hashes[1] and "wmt" in hashes[0]


def test_mtcore_datasets_lists_a_pair_and_prints_entries_that_load(write_recipe) -> None:
    runner = CliRunner()
    table = runner.invoke(cli, ["datasets", "en-ja", "--grep", "kftt"])
    assert table.exit_code == 0, table.output
    assert "Phontron-kftt_train-1-eng-jpn" in table.output
    assert "http://www.phontron.com/kftt/download/kftt-data-1.0.tar.gz" in table.output
    tests = runner.invoke(cli, ["datasets", "ja-en", "--source", "sacrebleu"])
    assert "wmt20:ja-en" in tests.output and "wmt22:ja-en" in tests.output
    assert "wmt20:en-ja" in tests.output  # either direction
    pasted = runner.invoke(cli, ["datasets", "en-ja", "--grep", "wmt20", "--recipe"])
    assert pasted.exit_code == 0, pasted.output
    entries = yaml.safe_load(pasted.output)["data"]
    assert entries["newstest_enja_2020_en_ja"] == {"mtdata": "Statmt-newstest_enja-2020-eng-jpn"}
    assert entries["wmt20_en_ja"] == {"sacrebleu": {"test_set": "wmt20", "langpair": "en-ja"}}
    doc = clean_split_recipe("pasted", {}, [], 5)
    doc["data"] = entries
    doc["steps"]["clean"]["inputs"] = {"corpus": "newstest_enja_2020_en_ja"}
    recipe = load_recipe(write_recipe(doc), load_registry())
    assert {"newstest_enja_2020_en_ja", "wmt20_en_ja"} <= set(recipe.steps)
    bad = runner.invoke(cli, ["datasets", "english-japanese"])
    assert bad.exit_code != 0 and "give a pair as L1-L2" in bad.output
    assert "no indexed corpus" in runner.invoke(cli, ["datasets", "en-ja", "-g", "zzzq"]).output


@pytest.fixture
def loopback(tmp_path: Path, monkeypatch) -> None:
    """Downloads go to 127.0.0.1 without a proxy, into a cache of the test's own."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("MTCORE_CACHE", str(tmp_path / "cache"))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_served(server: LoopbackServer, recipe: Path, work: Path) -> None:
    """``mtcore run RECIPE`` while ``server`` serves its downloads; the server closed after."""
    try:
        done = CliRunner().invoke(cli, ["run", "-q", str(recipe), "-w", str(work)])
        assert done.exit_code == 0, done.output
    finally:
        server.close()


def jesc_archive(rows: list[tuple[str, str]]) -> bytes:
    """JESC's split.tar.gz as its index describes it: member split/train, en<TAB>ja."""
    body = "".join(f"{en}\t{ja}\n" for en, ja in rows).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("split/train", body), ("split/dev", b"a\tb\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.skipif(not ENJA.is_dir(), reason=f"real data not found at {ENJA}")
def test_a_run_downloads_an_id_through_a_mirror_and_locks_it(
    tmp_path: Path, write_recipe, monkeypatch, loopback
) -> None:
    """``mtcore run`` with ``{mtdata: StanfordNLP-jesc_train-1-eng-jpn}`` and an institute's
    mirror (a true copy: no replicas): the archive comes from the mirror at the index's host
    and path, its member and columns are the index's, the lock file records its hash."""
    en = (ENJA / "train.en").read_text(encoding="utf-8").splitlines()[:300]
    ja = (ENJA / "train.ja").read_text(encoding="utf-8").splitlines()[:300]
    rows = list(zip(en, ja, strict=True))
    body = jesc_archive(rows)
    server = LoopbackServer()
    server.files["/nlp.stanford.edu/projects/jesc/data/split.tar.gz"] = body
    monkeypatch.setenv("MTCORE_MIRROR", server.url(""))
    doc = clean_split_recipe("byid", {}, [], 5)
    doc["data"] = {"bitext": {"mtdata": "StanfordNLP-jesc_train-1-eng-jpn"}}
    run_served(server, write_recipe(doc, "byid.yaml"), tmp_path / "w")
    assert [path for path, _ in server.requests] == [
        "/nlp.stanford.edu/projects/jesc/data/split.tar.gz"
    ]
    (folder,) = (tmp_path / "w" / "steps").glob("bitext-*")
    corpus = Corpus.open(folder / "corpus")
    assert corpus.langs == ("en", "ja") and corpus.count() == len(rows)
    read = [corpus.file(lang).read_text(encoding="utf-8").splitlines()[:3] for lang in corpus.langs]
    assert list(zip(*read, strict=True)) == rows[:3]
    locked = json.loads((tmp_path / "byid.lock").read_text())["files"]
    assert [entry["sha256"] for entry in locked.values()] == [hashlib.sha256(body).hexdigest()]


def test_sources_list_their_catalogue_only_when_they_name_by_id() -> None:
    assert SacrebleuSource.catalogue(("ja",)) == []
    found: Any = {entry.id for entry in MtdataSource.catalogue(("ja",), "news_crawl")}
    assert "Statmt-news_crawl-2021-jpn" in found
    from mtcore_plugins.sources.url import UrlSource

    assert UrlSource.catalogue(("en", "ja")) == []


@pytest.mark.skipif(not ENJA.is_dir(), reason=f"real data not found at {ENJA}")
def test_an_evaluation_names_its_indexed_test_set_and_takes_more_references(
    tmp_path: Path, write_recipe, monkeypatch, loopback
) -> None:
    """sacrebleu's wmt20 en-ja through a mirror (its test.tgz, .sgm members), concatenated as
    the recipes' ``test`` step does, scored against a hypothesis with a second translator's
    reference: BLEU is sacrebleu's two-reference BLEU, and the signature names the test set."""
    from sacrebleu.metrics import BLEU

    from tests.support.mirror import archive_bytes, sgm

    en = (ENJA / "test.en").read_text(encoding="utf-8").splitlines()[:120]
    ja = (ENJA / "test.ja").read_text(encoding="utf-8").splitlines()[:120]
    second = [line.replace("。", "") for line in ja]  # another translator, punctuation aside
    hyps = [a if i % 2 else b for i, (a, b) in enumerate(zip(ja, second, strict=True))]
    hyps = [h[: max(1, len(h) - 3)] for h in hyps]  # not quite either reference
    tgz = archive_bytes(
        "test.tgz",
        {
            "sgm/newstest2020-enja-src.en.sgm": sgm(en, "en"),
            "sgm/newstest2020-enja-ref.ja.sgm": sgm(ja, "ja"),
        },
    )
    for name, lines in (("hyp.ja", hyps), ("b.en", en), ("b.ja", second)):
        (tmp_path / name).write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    server = LoopbackServer()
    server.files["/data.statmt.org/wmt20/translation-task/test.tgz"] = tgz
    monkeypatch.setenv("MTCORE_MIRROR", server.url(""))
    # served as the real file, the stand-in fails the md5 sacrebleu pins for test.tgz
    wmt20 = SacrebleuSource.from_dict({"test_set": "wmt20", "langpair": "en-ja"})
    with pytest.raises(DataError, match=r"has md5 \w+, not the 3b1f777cfd2fb15ccf66e9bfdb2b1699 "):
        wmt20.download(Stats())
    assert not [p for p in (tmp_path / "cache" / "downloads").glob("*") if p.suffix != ".lock"]
    # accepted as the mirror's replica (the user's choice): checked against the mirror's hash
    replicas = {"https://data.statmt.org/wmt20/translation-task/test.tgz": sha256(tgz)}
    server.files["/mirror.json"] = json.dumps({"replicas": replicas}).encode()
    monkeypatch.setenv("MTCORE_MIRROR_REPLICAS", "1")
    _mirror._replicas.clear()
    doc = {
        "name": "refs",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {
            "wmt20_enja": {"sacrebleu": {"test_set": "wmt20", "langpair": "en-ja"}},
            "hyp": {"source": "local", "files": {"ja": str(tmp_path / "hyp.ja")}},
            "ref_b": {
                "source": "local",
                "files": {"en": str(tmp_path / "b.en"), "ja": str(tmp_path / "b.ja")},
            },
        },
        "steps": {
            "test": {"kind": "concat", "inputs": {"wmt20": "wmt20_enja"}},
            "eval_base_enja": {
                "kind": "evaluate",
                "inputs": {"hyp": "hyp", "ref": "test", "ref2": "ref_b"},
                "metrics": ["bleu"],
            },
        },
    }  # fmt: skip
    run_served(server, write_recipe(doc, "refs.yaml"), tmp_path / "w")
    (folder,) = (tmp_path / "w" / "steps").glob("eval_base_enja-*")
    scores = json.loads((folder / "scores" / "scores.json").read_text())
    assert scores["references"] == 2 and scores["test_set"] == "sacrebleu:wmt20:en-ja"
    (bleu,) = scores["scores"]
    assert bleu["signature"].startswith("nrefs:2|")
    assert bleu["signature"].endswith("|test:sacrebleu:wmt20:en-ja")
    tokenize = bleu["signature"].split("tok:")[1].split("-")[0]
    tokenize = {"ja": "ja-mecab"}.get(tokenize, tokenize)
    expected = BLEU(tokenize=tokenize).corpus_score(hyps, [ja, second]).score
    assert bleu["score"] == pytest.approx(expected, abs=1e-4)  # the plugin keeps 4 decimals
    single = BLEU(tokenize=tokenize).corpus_score(hyps, [ja]).score
    assert bleu["score"] > single
    report = (tmp_path / "w" / "report.md").read_text(encoding="utf-8")
    assert "test:sacrebleu:wmt20:en-ja" in report

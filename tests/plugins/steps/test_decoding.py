"""Decoding on real en-ja slices with micro models: beam search and n-best output independent of
the batch size, sampling seeded per shard, a killed translation resuming its finished shards,
force decoding that agrees with the search's own scores (one model, weighted ensembles of two
architectures, right-to-left models), the translation-model features, worker processes and a
neural LM trained by a recipe step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtcore.contracts.errors import DataError, PluginError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact, StepContext
from mtcore_plugins.common.decoding import translator as decoding
from mtcore_plugins.common.decoding.force import ForceDecoder
from mtcore_plugins.common.decoding.translator import Ensemble, Translator
from mtcore_plugins.executors.local import LocalExecutor
from mtcore_plugins.steps._nbest import Entry, read_nbest
from mtcore_plugins.steps.binarize import BinarizeStep
from mtcore_plugins.steps.spm import SentencePieceStep
from mtcore_plugins.steps.train import TrainStep
from mtcore_plugins.steps.translate import TranslateConfig, TranslateStep
from tests.plugins.steps.test_fairseq_steps import DATA, EDGE, write_corpus
from tests.support.steps import make_ctx

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA}")

MICRO = {
    "arch": "mtcore_transformer_micro",
    "max_tokens": 1024,
    "dropout": 0.1,
    "log_interval": 1,
    "threads": 1,
    "lr": 0.003,
    "warmup_updates": 2,
    "max_update": 5,
    "save_interval_updates": 5,
    "keep_last": 1,
    "average_last": 1,
}
LINES = 49  # 45 real sentences, the three edge pairs and one over the model's 256 positions
# Output caps that bind for a 5-update model (it babbles until stopped): a*source + b tokens.
CAPPED: dict[str, Any] = {"max_len_a": 0.5, "max_len_b": 2}


class Killed(Exception):
    """Stands in for the kill of a translation between two shards."""


@pytest.fixture(scope="module")
def setup(micro_setup: dict[str, Path]) -> dict[str, Path]:
    """Corpora, a SentencePiece model, en-ja data and a micro model trained for 5 updates (it
    repeats one piece until its output cap stops it): ``build_setup``'s, made once a worker."""
    return dict(micro_setup)


def build_setup(root: Path) -> dict[str, Path]:
    found = {
        "train": write_corpus(root / "train", "train", 1000, []),
        "valid": write_corpus(root / "valid", "dev", 60, []),
        "test": write_corpus(root / "test", "test", 45, [*EDGE, ("the " * 600, "長い")]),
    }
    SentencePieceStep.from_dict({"vocab_size": 1000, "num_threads": 1}).run(
        make_ctx(root / "spm", "spm", corpus=found["train"])
    )
    found["spm"] = root / "spm" / "model"
    ctx = make_ctx(
        root / "bin", "binarize", train=found["train"], valid=found["valid"], spm=found["spm"]
    )
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(ctx)
    found["data_enja"] = root / "bin" / "data"
    found["model"] = train(root / "micro", MICRO, found["data_enja"])
    return found


def train(work: Path, settings: dict[str, Any], data: Path) -> Path:
    TrainStep.from_dict(settings).run(make_ctx(work, "train", data=data))
    return work / "model"


def translate(
    setup: dict[str, Path], work: Path, workers: int = 1, executor: Any = None, **settings: Any
) -> tuple[StepContext, list[str], list[Entry]]:
    """Runs the translate step on the test corpus; (context, hyp lines, n-best entries). A
    given ``executor`` is used and left open; otherwise a local one with ``workers``."""
    models = settings.pop("models", {"model": setup["model"]})
    ctx = make_ctx(work, "translate", corpus=setup["test"], spm=setup["spm"], **models)
    ctx.executor = executor or LocalExecutor(LocalExecutor.Config(workers=workers))
    try:
        TranslateStep.from_dict({"src": "en", "tgt": "ja", "threads": 1, **settings}).run(ctx)
    finally:
        if executor is None:
            ctx.executor.close()
    hyps = (work / "hyp" / "hyp.ja").read_text(encoding="utf-8").split("\n")[:-1]
    nbest = work / "nbest" / "nbest.jsonl"
    return ctx, hyps, list(read_nbest(nbest)) if nbest.exists() else []


def texts(entries: list[Entry]) -> list[list[str]]:
    return [[text for text, _ in entry.hyps] for entry in entries]


# --- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # beam search keeps `beam` hypotheses: a longer n-best cannot exist
        ({"beam": 4, "nbest": 5}, "nbest 5 is more than beam 4"),
        # top-k only means something when sampling
        ({"sampling_topk": 10}, "need sampling: true"),
        # a nucleus of no probability mass samples nothing
        ({"sampling": True, "sampling_topp": 0.0}, "sampling_topp must be in"),
        # fairseq needs room for at least one token
        ({"max_len_b": 0}, "greater than or equal to 1"),
        # a typo is an error, not a silent default
        ({"nbets": 4}, "Extra inputs are not permitted"),
    ],
)
def test_translate_settings_rejected(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TranslateConfig.model_validate({"src": "en", "tgt": "ja", **settings})


# --- beam search, n-best, sampling --------------------------------------------------------


def test_outputs_do_not_depend_on_batch_size(
    setup: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 1, 7 and 64 sentences (shards of 20 lines) give the same 1-best and n-best
    texts, one per input line in order, the scores equal but for float rounding. fairseq alone
    caps a batch's outputs at its longest source, so without per-sentence caps they differ."""
    runs = {
        size: translate(
            setup, tmp_path / str(size), batch_size=size, chunk_lines=20, beam=4, nbest=3, **CAPPED
        )
        for size in (1, 7, 64)
    }
    _, hyps, entries = runs[1]
    assert len(hyps) == len(entries) == LINES
    for size in (7, 64):
        assert runs[size][1] == hyps and texts(runs[size][2]) == texts(entries)
        for ours, theirs in zip(runs[size][2], entries, strict=True):
            for (_, a), (_, b) in zip(ours.hyps, theirs.hyps, strict=True):
                assert a["fwd"] == pytest.approx(b["fwd"], abs=1e-4)
    # The 5-update model repeats a piece until stopped: the caps decide every length, and
    # the scores, as the mean log-probability per token, show it.
    monkeypatch.setattr(decoding, "limit_rows", lambda *args: None)
    _, _, uncapped = translate(
        setup, tmp_path / "uncapped", batch_size=64, chunk_lines=20, beam=4, nbest=3, **CAPPED
    )
    moved = [
        abs(a.hyps[0][1]["fwd"] - b.hyps[0][1]["fwd"]) > 1e-3
        for a, b in zip(uncapped, entries, strict=True)
    ]
    assert sum(moved) > 5


def test_nbest_entries(setup: dict[str, Path], tmp_path: Path) -> None:
    ctx, hyps, entries = translate(setup, tmp_path, beam=4, nbest=3, batch_size=16, **CAPPED)
    sources = (setup["test"] / "corpus.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert [e.id for e in entries] == list(range(LINES))
    assert [e.source for e in entries] == sources
    for entry, hyp in zip(entries, hyps, strict=True):
        assert 1 <= len(entry.hyps) <= 3 and entry.hyps[0][0] == hyp
        scores = [s["fwd"] for _, s in entry.hyps]
        assert scores == sorted(scores, reverse=True) and all(s <= 0 for s in scores)
    # empty and zero-piece sources: one empty hypothesis; the over-long one is truncated
    assert [texts([entries[i]]) for i in (45, 46)] == [[[""]], [[""]]]
    assert ctx.stats["translate.empty"] == 2 and ctx.stats["translate.truncated"] == 1
    blank = [i for i, hyp in enumerate(hyps) if not hyp.strip() and i not in (45, 46)]
    assert ctx.stats["translate.empty_output"] == len(blank)
    meta = Artifact.open(tmp_path / "nbest").meta
    assert meta["type"] == "nbest" and meta["lines"] == LINES and meta["n"] == 3
    assert meta["features"] == ["fwd"] and (meta["src"], meta["tgt"]) == ("en", "ja")


def test_sampling_is_seeded_per_shard(setup: dict[str, Path], tmp_path: Path) -> None:
    """HW-TSC §5.5 sampling BT: draws repeat with the seed and change with it."""
    settings = {"sampling": True, "nbest": 4, "sampling_topk": 20, "chunk_lines": 20, **CAPPED}
    _, first, drawn = translate(setup, tmp_path / "a", seed=5, **settings)
    _, again, redrawn = translate(setup, tmp_path / "b", seed=5, **settings)
    _, _other, other = translate(setup, tmp_path / "c", seed=6, **settings)
    assert texts(redrawn) == texts(drawn) and again == first
    assert texts(other) != texts(drawn)
    assert all(len(e.hyps) == 4 for e in drawn if e.source.strip())
    _, single, none = translate(setup, tmp_path / "one", sampling=True, seed=5, **CAPPED)
    assert len(single) == LINES and none == []  # one sample a line, no n-best output


def test_killed_translation_resumes_its_finished_shards(
    setup: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {"beam": 2, "nbest": 2, "chunk_lines": 10}  # five shards
    _, hyps, entries = translate(setup, tmp_path / "straight", **settings)
    calls = []
    search = Translator.translate_nbest

    def dies_in_the_third_shard(self: Translator, lines: list[str], n: int) -> Any:
        calls.append(len(lines))
        if len(calls) == 3:
            raise Killed
        return search(self, lines, n)

    monkeypatch.setattr(Translator, "translate_nbest", dies_in_the_third_shard)
    with pytest.raises(Killed):
        translate(setup, tmp_path / "killed", **settings)
    monkeypatch.undo()
    ctx, resumed, resumed_entries = translate(setup, tmp_path / "killed", **settings)
    assert ctx.metrics["shards_translated"] == 3  # shards 3-5; 1 and 2 were saved
    assert resumed == hyps and [e.hyps for e in resumed_entries] == [e.hyps for e in entries]
    assert ctx.stats["translate.truncated"] == 1  # counters of saved shards count too


# --- force decoding and the translation-model features ------------------------------------


def loaded(setup: dict[str, Path], **settings: Any) -> tuple[Translator, ForceDecoder]:
    """A translator of ``models`` and a force decoder of the very same loaded ensemble."""
    models = settings.pop("models", {"model": setup["model"]})
    ctx = make_ctx(setup["model"].parent / "x", "translate", spm=setup["spm"], **models)
    config = TranslateConfig(src="en", tgt="ja", beam=4, nbest=4, **CAPPED, **settings)
    translator = Translator(config, ctx)
    ensemble = Ensemble(
        translator.models, translator.src_dict, translator.tgt_dict, translator.spm,
        translator.direction, translator.max_source, None, translator.device,
    )  # fmt: skip
    return translator, ForceDecoder(ensemble, max_tokens=256)


def check_against_search(translator: Translator, decoder: ForceDecoder) -> int:
    """Force decoding the search's own hypotheses (their token ids, as the models read them)
    gives the search's scores; returns how many hypotheses were compared."""
    lines = (DATA / "dev.en").read_text(encoding="utf-8").splitlines()[:30]
    sources = [translator._encode(p) for p in translator.spm.encode(lines, out_type=str)]
    targets, rows, wanted = [], [], []
    for row, hyps in enumerate(translator._search(sources)):
        for hyp in hyps:
            targets.append(hyp["tokens"])
            rows.append(row)
            wanted.append(float(hyp["positional_scores"].sum()))
    sums, counts = decoder.score_ids(sources, targets, rows)
    assert sums == pytest.approx(wanted, abs=1e-3)
    assert list(counts) == [len(t) for t in targets]
    return len(targets)


def test_force_decoding_agrees_with_beam_search(setup: dict[str, Path]) -> None:
    translator, decoder = loaded(setup)
    assert check_against_search(translator, decoder) == 30 * 4
    # the text path: what a hypothesis' text re-encodes to is what gets scored
    pair = ("i 'm hungry .", "お腹 が 空 い た 。")
    pieces = translator.spm.encode(pair[1], out_type=str)
    ids = translator.tgt_dict.encode_line(" ".join(pieces), add_if_not_exist=False).long()
    by_ids, _ = decoder.score_ids(
        [translator._encode(translator.spm.encode(pair[0], out_type=str))], [ids]
    )
    by_text, counts = decoder.score([pair[0]], [pair[1]])
    assert by_text[0] == pytest.approx(by_ids[0], abs=1e-5) and counts[0] == len(ids)


def test_translation_features(setup: dict[str, Path]) -> None:
    """``forward`` is the force decoder's score, normalized per token (or as a probability);
    ``backward`` wants a target-to-source model; ``direction`` must match the models'."""
    registry = load_registry()
    pairs = list(
        zip(
            (DATA / "dev.en").read_text(encoding="utf-8").splitlines()[:12],
            (DATA / "dev.ja").read_text(encoding="utf-8").splitlines()[:12],
            strict=True,
        )
    )
    resources = {"model": setup["model"], "spm": setup["spm"]}
    forward = registry.load("scorers", "forward").from_dict({})
    forward.setup("en", "ja", resources)
    _, decoder = loaded(setup)
    sums, counts = decoder.score([p[0] for p in pairs], [p[1] for p in pairs])
    assert forward.score(pairs) == pytest.approx(list(sums / counts), abs=1e-5)
    prob = registry.load("scorers", "forward").from_dict({"normalize": "prob"})
    prob.setup("en", "ja", resources)
    assert prob.score(pairs) == pytest.approx(list(np.exp(sums / counts)), abs=1e-6)
    backward = registry.load("scorers", "backward").from_dict({})
    with pytest.raises(DataError, match="translates en->ja, not ja->en"):
        backward.setup("en", "ja", resources)
    r2l = registry.load("scorers", "forward").from_dict({"direction": "r2l"})
    with pytest.raises(PluginError, match="asks for r2l models; .* is l2r"):
        r2l.setup("en", "ja", resources)
    with pytest.raises(PluginError, match="needs the step input 'spm'"):
        forward.setup("en", "ja", {"model": setup["model"]})


# --- slow: more models, processes, a neural LM --------------------------------------------


@pytest.mark.slow
def test_ensembles_and_r2l_force_decode_as_they_search(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """A weighted ensemble of two architectures (NT5 §4.4) and a right-to-left model (NT5 §5.1,
    Xiaomi §3.4): force decoding scores what the search scored, and the ``forward`` feature
    with ``direction: r2l`` reads the restored text right to left again."""
    tiny = train(
        tmp_path / "tiny", {**MICRO, "arch": "mtcore_transformer_tiny"}, setup["data_enja"]
    )
    r2l = train(tmp_path / "r2l", {**MICRO, "direction": "r2l"}, setup["data_enja"])
    ensemble = {"model": setup["model"], "model2": tiny}
    translator, decoder = loaded(setup, models=ensemble, weights={"model": 1.0, "model2": 3.0})
    assert check_against_search(translator, decoder) == 30 * 4
    translator, decoder = loaded(setup, models={"model": r2l})
    assert translator.direction == "r2l"
    assert check_against_search(translator, decoder) == 30 * 4
    # text in reading order is read right to left, as the model was trained
    source, text = "i 'm hungry .", "お腹 が 空 い た 。"
    pieces = translator.spm.encode(text, out_type=str)[::-1]
    ids = translator.tgt_dict.encode_line(" ".join(pieces), add_if_not_exist=False).long()
    source_ids = translator._encode(translator.spm.encode(source, out_type=str))
    by_ids, _ = decoder.score_ids([source_ids], [ids])
    by_text, _ = decoder.score([source], [text])
    assert by_text[0] == pytest.approx(by_ids[0], abs=1e-5)
    feature = load_registry().load("scorers", "forward").from_dict({"direction": "r2l"})
    feature.setup("en", "ja", {"model": r2l, "spm": setup["spm"]})
    assert feature.score([(source, text)]) == pytest.approx([by_ids[0] / len(ids)], abs=1e-5)


@pytest.mark.slow
def test_worker_processes_translate_as_one_process(setup: dict[str, Path], tmp_path: Path):
    """Two spawned workers (each loads the model once) write what one process writes."""
    settings = {"beam": 3, "nbest": 2, "chunk_lines": 12, **CAPPED}
    _, alone, entries = translate(setup, tmp_path / "one", **settings)
    ctx, pooled, pooled_entries = translate(setup, tmp_path / "two", workers=2, **settings)
    assert pooled == alone and texts(pooled_entries) == texts(entries)
    assert ctx.metrics["shards_translated"] == 5


@pytest.mark.slow
def test_train_lm_and_neural_lm_feature(setup: dict[str, Path], tmp_path: Path) -> None:
    """A fairseq transformer_lm trained by the train_lm step (Xiaomi §3.4 neural LM): Japanese
    it has seen the like of scores above English; ``sum`` is ``token`` x (pieces + 1)."""
    from mtcore_plugins.steps.train_lm import TrainLMStep

    settings = {"lang": "ja", "layers": 1, "embed_dim": 64, "ffn_embed_dim": 128, "heads": 2}
    settings |= {"max_update": 20, "warmup_updates": 5, "lr": 0.003, "threads": 1}
    ctx = make_ctx(
        tmp_path, "train_lm", corpus=setup["train"], valid=setup["valid"], spm=setup["spm"]
    )
    TrainLMStep.from_dict(settings).run(ctx)
    meta = Artifact.open(tmp_path / "model").meta
    assert meta["type"] == "fairseq-lm" and meta["lang"] == "ja"
    assert ctx.metrics["updates"] == 20 and ctx.stats["train_lm.train_sentences"] == 1000
    registry = load_registry()
    feature = registry.load("scorers", "neural_lm").from_dict({})
    feature.setup("en", "ja", {"lm": tmp_path / "model", "spm": setup["spm"]})
    ja = (DATA / "test.ja").read_text(encoding="utf-8").splitlines()[:30]
    en = (DATA / "test.en").read_text(encoding="utf-8").splitlines()[:30]
    assert np.mean(feature.score([("", t) for t in ja])) > np.mean(
        feature.score([("", t) for t in en])
    )
    summed = registry.load("scorers", "neural_lm").from_dict({"normalize": "sum"})
    summed.setup("en", "ja", {"lm": tmp_path / "model", "spm": setup["spm"]})
    pieces = len(feature.spm.encode(ja[0], out_type=str)) + 1
    assert summed.score([("", ja[0])])[0] == pytest.approx(feature.score([("", ja[0])])[0] * pieces)
    with pytest.raises(PluginError, match="models 'ja', not the target language 'en'"):
        feature.setup("ja", "en", {"lm": tmp_path / "model", "spm": setup["spm"]})
    assert json.loads((tmp_path / "model" / "artifact.json").read_text())["arch"] == (
        "transformer_lm"
    )


def test_device_setting() -> None:
    import torch

    assert decoding.pick_device("cpu") == "cpu"
    assert decoding.pick_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(DataError, match="torch sees no GPU"):
            decoding.pick_device("cuda")
    with pytest.raises(ValueError, match="device"):
        TranslateConfig(src="en", tgt="ja", device="tpu")

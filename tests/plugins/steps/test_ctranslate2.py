"""The CTranslate2 backend (issue 25) on real en-ja lines with micro models trained here: float32
beam output and n-best lists equal to fairseq's, scores that agree, Shaw relative positions,
output caps that bind, sampling seeded per shard, architectures that cannot convert refused
before any work (or, with ``auto``, decoded by fairseq), conversion cached by content, and the
translate step's hash unchanged for recipes that do not ask for the new backend."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import DataError, PluginError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact
from mtcore_plugins.common.ct2.convert import converted
from mtcore_plugins.steps.translate import TranslateStep
from tests.plugins.steps.test_decoding import CAPPED, MICRO, texts, train, translate
from tests.plugins.steps.test_fairseq_steps import DATA, EDGE, write_corpus

pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA}")
os.environ.setdefault("OMP_NUM_THREADS", "1")

DEV_LINES = 300  # real dev sentences, plus the edge pairs


@pytest.fixture(scope="module")
def setup(
    micro_setup: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """test_decoding's setup (a 5-update micro model that babbles until its cap) plus a
    120-update micro model that has learned a little (varied, if poor, output), an encoder-RPE
    model (NT5 §4.1), a right-to-left model, a B2T model, 300 real dev lines, and a private
    conversion cache."""
    root = tmp_path_factory.mktemp("ct2")
    saved = os.environ.get("MTCORE_CACHE")
    os.environ["MTCORE_CACHE"] = str(root / "cache")
    found = dict(micro_setup)
    found["dev"] = write_corpus(root / "dev", "dev", DEV_LINES, EDGE)
    longer = {"max_update": 120, "save_interval_updates": 120, "max_tokens": 2048, "dropout": 0.0}
    found["trained"] = train(root / "m60", {**MICRO, **longer}, found["data_enja"])
    rpe = {"arch": "mtcore_nt5_rpe_tiny", "models": ["rpe"], "max_update": 30}
    found["rpe"] = train(
        root / "rpe", {**MICRO, **rpe, "save_interval_updates": 30}, found["data_enja"]
    )
    r2l = {"direction": "r2l", "max_update": 30, "save_interval_updates": 30}
    found["r2l"] = train(root / "r2l", {**MICRO, **r2l}, found["data_enja"])
    b2t = {"arch": "mtcore_nt5_b2t_tiny", "models": ["b2t"], "max_update": 2}
    found["b2t"] = train(
        root / "b2t", {**MICRO, **b2t, "save_interval_updates": 2}, found["data_enja"]
    )
    yield found
    if saved is None:
        os.environ.pop("MTCORE_CACHE", None)
    else:
        os.environ["MTCORE_CACHE"] = saved


def both(setup: dict[str, Path], work: Path, model: str, **settings: Any) -> tuple[Any, Any]:
    """(fairseq, CTranslate2) runs of the translate step on the dev lines: each is
    (context, hyp lines, n-best entries)."""
    data = {**setup, "test": setup["dev"], "model": setup[model]}
    fairseq = translate(data, work / "fairseq", **settings)
    ct2 = translate(data, work / "ct2", backend="ctranslate2", **settings)
    return fairseq, ct2


def agreement(a: list[str], b: list[str]) -> float:
    assert len(a) == len(b)
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


@pytest.mark.parametrize(
    ("model", "settings"),
    [
        # a model that translates: no cap binds, fairseq's own stopping decides
        ("trained", {"beam": 5, "nbest": 5}),
        # one that babbles: every output ends at its a*src+b cap, where fairseq forces EOS
        ("model", {"beam": 4, "nbest": 4, "max_len_a": 0.5, "max_len_b": 2}),
        # Shaw relative positions in the encoder, k = 16 (CTranslate2's max_relative_positions)
        ("rpe", {"beam": 4, "nbest": 4}),
        # a right-to-left model: its output is put back in reading order
        ("r2l", {"beam": 4, "nbest": 4}),
    ],
)
def test_float32_beam_and_nbest_equal_fairseq(
    setup: dict[str, Path], tmp_path: Path, model: str, settings: dict[str, Any]
) -> None:
    (f_ctx, f_hyps, f_nbest), (c_ctx, c_hyps, c_nbest) = both(setup, tmp_path, model, **settings)
    assert c_ctx.metrics["backend"] == "ctranslate2"
    assert len(c_hyps) == len(c_nbest) == DEV_LINES + len(EDGE)  # one output per input
    assert agreement(f_hyps, c_hyps) >= 0.99
    # n-best lists: the same best hypothesis; lower ranks may differ where fairseq stopped its
    # beam at `beam` finished hypotheses and CTranslate2 found better-scored ones
    f_lists, c_lists = texts(f_nbest), texts(c_nbest)
    assert agreement([t[0] for t in f_lists], [t[0] for t in c_lists]) >= 0.99
    assert agreement([str(t) for t in f_lists], [str(t) for t in c_lists]) >= 0.7  # 77 %: 120-up
    ranks = [
        (x[1]["fwd"], y[1]["fwd"])
        for a, b in zip(f_nbest, c_nbest, strict=True)
        for x, y in zip(a.hyps, b.hyps, strict=True)
    ]
    assert sum(ct2 >= fs - 1e-4 for fs, ct2 in ranks) >= 0.99 * len(ranks)
    # the same hypothesis scores the same (both: mean log-probability per token, EOS included);
    # compared where a text occurs once in each list: a weak model's equal texts may be
    # different pieces (runs of a bare "▁" decode to nothing)
    diffs = []
    for a, b in zip(f_nbest, c_nbest, strict=True):
        mine = [t for t, _ in a.hyps]
        theirs = {t: s for t, s in b.hyps if [u for u, _ in b.hyps].count(t) == 1}
        for text, scores in a.hyps:
            if mine.count(text) == 1 and text in theirs:
                diffs.append(abs(scores["fwd"] - theirs[text]["fwd"]))
    assert sum(d < 1e-3 for d in diffs) >= 0.97 * len(diffs)
    assert c_ctx.stats["translate.empty"] == f_ctx.stats["translate.empty"] == 2
    assert c_nbest[DEV_LINES].hyps == [("", {"fwd": 0.0})]  # the empty source


@pytest.mark.parametrize("capped", [True, False])
def test_greedy_output_equals_fairseq(setup: dict[str, Path], tmp_path: Path, capped: bool) -> None:
    """Greedy search (the cpu profiles' back-translation) without n-best: an output that ran to
    its own cap below its batch's is cut there, not decoded again, and still equals fairseq's
    (with caps of half the source, most outputs of the 120-update model reach theirs; a batch
    of 64 mixes caps)."""
    settings = {"beam": 1, "batch_size": 64, **(CAPPED if capped else {})}
    (f_ctx, f_hyps, _), (c_ctx, c_hyps, _) = both(setup, tmp_path, "trained", **settings)
    assert c_ctx.metrics["backend"] == "ctranslate2"
    assert agreement(f_hyps, c_hyps) >= 0.99


@pytest.mark.parametrize("backend", ["fairseq", "ctranslate2"])
def test_no_repeat_ngram_size_blocks_repeats(
    setup: dict[str, Path], tmp_path: Path, backend: str
) -> None:
    """The 120-update model loops (``彼女 は は は は は は 。``); with no_repeat_ngram_size 2
    no pair of pieces occurs twice in an output, so no word follows itself, on either
    backend (fairseq's own Python path, without its CUDA extension, blocked nothing:
    decoding.block_repeats_by_step). The two searches are not the same: CTranslate2 blocks
    before its softmax, so the other tokens' probabilities renormalise, fairseq after it."""
    data = {**setup, "test": setup["dev"], "model": setup["trained"]}
    _, looping, _ = translate(data, tmp_path / "free", backend=backend, beam=2)
    _, blocked, _ = translate(
        data, tmp_path / "blocked", backend=backend, beam=2, no_repeat_ngram_size=2
    )

    def loops(line: str) -> bool:
        words = line.split()
        return any(a == b for a, b in itertools.pairwise(words))

    assert sum(map(loops, looping)) > len(looping) // 4
    assert not any(map(loops, blocked))


def test_int8_runs_and_stays_close(setup: dict[str, Path], tmp_path: Path) -> None:
    data = {**setup, "test": setup["dev"], "model": setup["trained"]}
    _, exact, _ = translate(data, tmp_path / "f32", backend="ctranslate2")
    _, quantized, _ = translate(data, tmp_path / "int8", backend="ctranslate2", compute_type="int8")
    assert len(quantized) == len(exact) and agreement(exact, quantized) >= 0.5


def test_sampling_is_seeded_and_one_output_per_input(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    data = {**setup, "test": setup["dev"], "model": setup["trained"]}
    settings = {"backend": "ctranslate2", "sampling": True, "nbest": 3, "chunk_lines": 50}
    _, first, drawn = translate(data, tmp_path / "a", seed=5, sampling_topk=20, **settings)
    _, again, redrawn = translate(data, tmp_path / "b", seed=5, sampling_topk=20, **settings)
    _, _, other = translate(data, tmp_path / "c", seed=6, sampling_topk=20, **settings)
    assert again == first and texts(redrawn) == texts(drawn) and texts(other) != texts(drawn)
    assert len(first) == DEV_LINES + len(EDGE)
    assert all(len(e.hyps) == 3 for e in drawn if e.source.strip())
    for entry in drawn:
        scores = [s["fwd"] for _, s in entry.hyps]
        assert scores == sorted(scores, reverse=True)


def test_what_cannot_convert_is_refused_or_falls_back(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """B2T (NT5 §4.1) has a residual CTranslate2 layers lack: an error naming it before any
    line is decoded; ``auto`` decodes it (and any ensemble) with fairseq instead."""
    data = {**setup, "model": setup["b2t"]}
    with pytest.raises(DataError, match="B2T connections"):
        translate(data, tmp_path / "refused", backend="ctranslate2", **CAPPED)
    assert not (tmp_path / "refused" / "hyp").exists()
    ctx, hyps, _ = translate(data, tmp_path / "auto", backend="auto", **CAPPED)
    _, plain, _ = translate(data, tmp_path / "plain", **CAPPED)
    assert ctx.metrics["backend"] == "fairseq" and hyps == plain
    pair = {"models": {"model": setup["trained"], "model2": setup["trained"]}}
    ctx, _, _ = translate(setup, tmp_path / "ensemble", backend="auto", **pair, **CAPPED)
    assert ctx.metrics["backend"] == "fairseq"
    ctx, _, _ = translate(setup, tmp_path / "single", backend="auto", **CAPPED)
    assert ctx.metrics["backend"] == "ctranslate2"


def test_conversion_is_cached_by_content(setup: dict[str, Path]) -> None:
    model = Artifact.open(setup["trained"])
    first = converted(model, "en", "ja", ["transformer_presets"])
    stamp = (first / "model.bin").stat().st_mtime_ns
    again = converted(model, "en", "ja", ["transformer_presets"])
    assert again == first and (again / "model.bin").stat().st_mtime_ns == stamp
    assert first.parent == Path(os.environ["MTCORE_CACHE"]) / "ctranslate2"
    assert converted(Artifact.open(setup["rpe"]), "en", "ja", ["transformer_presets"]) != first


def test_a_system_from_someone_else_converts_outside_the_users_cache(
    setup: dict[str, Path],
) -> None:
    """Issue 70: ``translate --system`` converted an exported system's models into the user's
    cache. Inside :func:`private_conversions` (what ``translate --system`` runs in) they go to
    a fresh folder of this user's only, gone afterwards; the user's cache gains nothing."""
    from mtcore.recipe.hashing import CONVERSIONS_ENV, conversions_home, private_conversions

    cache = Path(os.environ["MTCORE_CACHE"]) / "ctranslate2"
    before = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    model = Artifact.open(setup["rpe"])
    with private_conversions() as folder:
        assert conversions_home() == folder and folder.stat().st_mode & 0o077 == 0
        made = converted(model, "en", "ja", ["transformer_presets"])
        assert made.parent == folder and (made / "model.bin").exists()
    assert not folder.exists() and CONVERSIONS_ENV not in os.environ
    assert (sorted(p.name for p in cache.iterdir()) if cache.exists() else []) == before


def test_default_backend_keeps_the_step_hash() -> None:
    """Recipes written before the backend existed keep their translate steps' identity."""
    registry = load_registry()
    plain = TranslateStep.from_dict({"src": "en", "tgt": "ja"}).identity(registry)
    assert "backend" not in plain and "compute_type" not in plain
    assert "no_repeat_ngram_size" not in plain
    blocked = TranslateStep.from_dict({"src": "en", "tgt": "ja", "no_repeat_ngram_size": 3})
    assert blocked.identity(registry)["no_repeat_ngram_size"] == 3
    auto = TranslateStep.from_dict({"src": "en", "tgt": "ja", "backend": "auto"})
    assert auto.identity(registry)["backend"] == "auto"
    with pytest.raises(ValueError, match="backend"):
        TranslateStep.from_dict({"src": "en", "tgt": "ja", "backend": "marian"})


@pytest.mark.parametrize("model", ["trained", "rpe", "r2l"])
def test_force_decoding_features_equal_fairseq(setup: dict[str, Path], model: str) -> None:
    """The ``forward`` rerank feature (NT5 §5.1) through CTranslate2's score_batch gives
    fairseq's force-decoding scores; the over-long pair is scored on what the model reads."""
    registry = load_registry()
    sources = (DATA / "dev.en").read_text(encoding="utf-8").splitlines()[:60]
    targets = (DATA / "dev.ja").read_text(encoding="utf-8").splitlines()[:60]
    pairs = [*zip(sources, targets, strict=True), ("the " * 600, "長い"), ("i see .", "")]
    resources = {"model": setup[model], "spm": setup["spm"]}
    found = {}
    for backend in ("fairseq", "ctranslate2"):
        scorer = registry.load("scorers", "forward").from_dict({"backend": backend})
        scorer.setup("en", "ja", resources)
        found[backend] = scorer.score(pairs)
    assert type(scorer.decoder).__name__ == "Ct2ForceDecoder"
    assert found["ctranslate2"] == pytest.approx(found["fairseq"], abs=1e-4)
    backward = registry.load("scorers", "backward").from_dict({"backend": "ctranslate2"})
    with pytest.raises(DataError, match="translates en->ja, not ja->en"):
        backward.setup("en", "ja", resources)


def test_force_decoding_refuses_or_falls_back(setup: dict[str, Path]) -> None:
    registry = load_registry()
    resources = {"model": setup["b2t"], "spm": setup["spm"]}
    strict = registry.load("scorers", "forward").from_dict({"backend": "ctranslate2"})
    with pytest.raises(PluginError, match="cannot score: B2T connections"):
        strict.setup("en", "ja", resources)
    auto = registry.load("scorers", "forward").from_dict({"backend": "auto"})
    auto.setup("en", "ja", resources)
    assert type(auto.decoder).__name__ == "ForceDecoder"


@pytest.mark.parametrize("noisy", ["model", "r2l"])
def test_denoise_scores_equal_fairseq(setup: dict[str, Path], noisy: str) -> None:
    """HW-TSC's denoise score (§2.3) through CTranslate2's score_batch equals fairseq's, the
    over-long pair NaN in both (it fails the threshold and ranks last), an empty target
    scored on its EOS; a model that does not convert is refused, or scored by fairseq."""
    registry = load_registry()
    sources = (DATA / "dev.en").read_text(encoding="utf-8").splitlines()[:60]
    targets = (DATA / "dev.ja").read_text(encoding="utf-8").splitlines()[:60]
    pairs = [*zip(sources, targets, strict=True), ("the " * 600, "長い"), ("i see .", "")]
    resources = {"clean": setup["trained"], "noisy": setup[noisy], "spm": setup["spm"]}
    found = {}
    for backend in ("fairseq", "ctranslate2"):
        plugin = registry.load("filters", "denoise").from_dict({"backend": backend})
        plugin.setup(("en", "ja"), resources)
        found[backend] = plugin.score(pairs)
    assert type(plugin._decoder("clean")).__name__ == "Ct2ForceDecoder"
    assert found["ctranslate2"][:-2] == pytest.approx(found["fairseq"][:-2], abs=1e-4)
    assert found["fairseq"][-2] != found["fairseq"][-2]  # NaN
    assert found["ctranslate2"][-2] != found["ctranslate2"][-2]
    assert found["ctranslate2"][-1] == pytest.approx(found["fairseq"][-1], abs=1e-4)
    b2t = {**resources, "noisy": setup["b2t"], "clean": setup["b2t"]}
    strict = registry.load("filters", "denoise").from_dict({"backend": "ctranslate2"})
    strict.setup(("en", "ja"), b2t)
    with pytest.raises(PluginError, match="cannot score: B2T connections"):
        strict.score(pairs[:2])
    auto = registry.load("filters", "denoise").from_dict({"backend": "auto"})
    auto.setup(("en", "ja"), b2t)
    assert auto.score(pairs[:2]) == pytest.approx([0.0, 0.0], abs=1e-9)
    assert type(auto._decoder("clean")).__name__ == "ForceDecoder"  # the shared fairseq one


def test_killed_translation_resumes_its_finished_shards(
    setup: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 point 5: a CTranslate2 translation killed in its third shard resumes with the
    missing shards only, and ends with the output of one that ran through."""
    from mtcore_plugins.steps._ct2_decoding import Ct2Translator
    from tests.plugins.steps.test_decoding import Killed

    settings = {"beam": 2, "nbest": 2, "chunk_lines": 10, "backend": "ctranslate2"}  # 5 shards
    _, hyps, entries = translate(setup, tmp_path / "straight", **settings)
    calls = []
    search = Ct2Translator.translate_nbest

    def dies_in_the_third_shard(self: Ct2Translator, lines: list[str], n: int, **kw: Any) -> Any:
        calls.append(len(lines))
        if len(calls) == 3:
            raise Killed
        return search(self, lines, n, **kw)

    monkeypatch.setattr(Ct2Translator, "translate_nbest", dies_in_the_third_shard)
    with pytest.raises(Killed):
        translate(setup, tmp_path / "killed", **settings)
    monkeypatch.undo()
    ctx, resumed, resumed_entries = translate(setup, tmp_path / "killed", **settings)
    assert ctx.metrics["backend"] == "ctranslate2"
    assert ctx.metrics["shards_translated"] == 3  # shards 3-5; 1 and 2 were saved
    assert resumed == hyps and texts(resumed_entries) == texts(entries)


def test_export_writes_a_model_ctranslate2_loads_as_the_step_decodes_it(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """``export_model`` of a trained fairseq model (``mtcore export --format ctranslate2``):
    CTranslate2's own Translator, with the SentencePiece model written beside it, translates
    the dev lines as the step's CTranslate2 backend did (greedy, float32); int8 is written
    int8 and its decode is the export's own; an ensemble is refused by name."""
    import ctranslate2
    import sentencepiece as spm

    data = {**setup, "test": setup["dev"], "model": setup["trained"]}
    _, expected, _ = translate(data, tmp_path / "run", backend="ctranslate2", beam=1)
    step = TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 1})
    inputs = {"model": Artifact.open(setup["trained"]), "spm": Artifact.open(setup["spm"])}
    made = step.export_model(inputs, "ctranslate2", tmp_path / "f32", "float32", load_registry())
    pieces = spm.SentencePieceProcessor(model_file=str(tmp_path / "f32" / "spm.model"))
    lines = (setup["dev"] / "corpus.en").read_text(encoding="utf-8").split("\n")[:40]
    native = ctranslate2.Translator(str(tmp_path / "f32"))
    got = []
    for line in lines:  # alone, under the step's cap: 1.5 * (pieces + EOS) + 10
        source = pieces.encode(line, out_type=str)
        if not source:  # the step's empty output for an empty source
            got.append("")
            continue
        cap = min(int((len(source) + 1) * 1.5 + 10), made.info["positions"]["target"] - 2)
        (found,) = native.translate_batch([source], beam_size=1, max_decoding_length=cap,
                                          min_decoding_length=1)  # fmt: skip
        got.append(pieces.decode_pieces(found.hypotheses[0]))
    assert got == expected[:40]
    assert made.decode(lines, True) == expected[:40] == made.decode(lines, False)
    quantized = step.export_model(inputs, "ctranslate2", tmp_path / "q", "int8", load_registry())
    assert len(quantized.decode(lines, True)) == 40
    sizes = [(tmp_path / name / "model.bin").stat().st_size for name in ("q", "f32")]
    assert sizes[0] < sizes[1] * 0.6  # int8 weights: about a quarter of float32's, plus the rest
    ensemble = {**inputs, "model2": Artifact.open(setup["trained"])}
    with pytest.raises(DataError, match="ensemble"):
        step.export_model(ensemble, "ctranslate2", tmp_path / "e", "int8", load_registry())


def test_export_check_compares_the_client_with_the_run_and_refuses_a_mismatch(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """The export's check (issue 71): the written float32 model, decoded by CTranslate2's
    ``translate_batch`` with the settings the export states, against the run's fairseq decode
    (greedy: both engines agree); one planted line that differs out of 40 is under the
    threshold and refused, unless allowed, and the share is then recorded."""
    from mtcore.contracts.errors import MtcoreError
    from mtcore.system.model_export import FLOAT32_IDENTICAL, run_check

    data = {**setup, "test": setup["dev"], "model": setup["trained"]}
    _, run, _ = translate(data, tmp_path / "run", backend="fairseq", beam=1)
    step = TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 1})
    inputs = {"model": Artifact.open(setup["trained"]), "spm": Artifact.open(setup["spm"])}
    made = step.export_model(inputs, "ctranslate2", tmp_path / "f32", "float32", load_registry())
    assert made.info["client"]["translate_batch"]["beam_size"] == 1
    lines = (setup["dev"] / "corpus.en").read_text(encoding="utf-8").split("\n")[:40]
    exported = made.decode(lines, True)
    check = run_check(exported, run[:40], "float32", False)
    assert check["identical_to_run"] >= FLOAT32_IDENTICAL
    planted = [*run[:39], run[39] + " x"]
    with pytest.raises(MtcoreError, match="float32 export refused.*line 40"):
        run_check(exported, planted, "float32", False)
    allowed = run_check(exported, planted, "float32", True)
    assert allowed["identical_to_run"] == 0.975 and allowed["differing_lines"] == [39]

"""Pretrained models by id (the recipe's ``models`` section) as teachers: tiny random OPUS-MT
(Marian), M2M-100 and NLLB models built here with transformers' own classes, fetched as
``hf:`` ids through a mirror (resumable, checksummed, locked) or from a directory, checked as
data, and decoded by the translate step with CTranslate2 exactly as transformers' own greedy
search decodes them."""

from __future__ import annotations

import hashlib
import json
import math
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.errors import RecipeError
from mtcore.contracts.registry import load_registry
from mtcore.data.corpus import Corpus
from mtcore.recipe.load import load_recipe
from mtcore_plugins.common.hub.pretrained import load_tokenizer
from tests.plugins.sources.test_sources import LoopbackServer
from tests.plugins.sources.test_sources_ids import loopback  # noqa: F401 (a fixture)
from tests.support import ROOT
from tests.support.data import ENJA
from tests.support.tiny_pretrained import build, greedy

pytestmark = pytest.mark.skipif(not ENJA.is_dir(), reason=f"real data not found at {ENJA}")

REVISION = "0123456789abcdef0123456789abcdef01234567"
TARGET = {"marian": None, "m2m100": "__ja__", "nllb": "jpn_Jpan", "mbart50": "ja_XX"}


def lines(split: str, lang: str, n: int) -> list[str]:
    return (ENJA / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:n]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """One tiny model per family, its SentencePiece model trained on real en and ja lines."""
    root = tmp_path_factory.mktemp("pretrained")
    text = lines("train", "en", 400) + lines("train", "ja", 400)
    return {family: build(family, text, root / family, seed=2) for family in TARGET}


def teacher_recipe(tmp_path: Path, model: dict[str, Any], **translate: Any) -> dict[str, Any]:
    translate = {k: v for k, v in translate.items() if v is not None}
    """A test set (real en-ja lines, one source empty) translated en->ja by ``models.teacher``."""
    src, ref = lines("test", "en", 12), lines("test", "ja", 12)
    src[5] = ""
    (tmp_path / "t.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t.ja").write_text("\n".join(ref) + "\n", encoding="utf-8")
    files = {"en": str(tmp_path / "t.en"), "ja": str(tmp_path / "t.ja")}
    return {
        "name": "teacher",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {"test": {"source": "local", "files": files, "input": {"empty": "keep"}}},
        "models": {"teacher": model},
        "steps": {
            "bt": {
                "kind": "translate",
                "inputs": {"model": "teacher", "corpus": "test"},
                **{"src": "en", "tgt": "ja", "beam": 1, **translate},
            }
        },
    }


def serve(server: LoopbackServer, repo: str, model: Path) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    for name, body in files.items():
        server.files[f"/huggingface.co/{repo}/resolve/{REVISION}/{name}"] = body
    return files


def output(work: Path, step: str, output: str = "hyp") -> list[str]:
    (folder,) = (work / "steps").glob(f"{step}-*")
    corpus = Corpus.open(folder / output)
    return corpus.file(corpus.langs[0]).read_text(encoding="utf-8").splitlines()


def reference(model: Path, family: str, sources: list[str]) -> list[str]:
    """transformers' greedy translation of each non-empty source under the step's cap
    (1.5 * source tokens + 10, the tokenizer's EOS and language token counted)."""
    tok = load_tokenizer(model)
    caps = [min(math.floor(len(tok(s)["input_ids"]) * 1.5 + 10), 62) for s in sources]
    return greedy(model, sources, TARGET[family], caps)


@pytest.mark.parametrize("family", list(TARGET))
def test_a_hub_teacher_fetched_through_a_mirror_decodes_as_transformers_does(
    family: str,
    models: dict[str, Path],
    tmp_path: Path,
    write_recipe,
    monkeypatch,
    loopback,  # noqa: F811
) -> None:
    """``{hf: ORG/NAME, revision: COMMIT}`` through ``$MTCORE_MIRROR`` (a true copy): every
    file the family needs comes from the mirror at the hub's address and is locked; the
    translate step decodes with CTranslate2 and the model's own tokenizer, the target language
    as prefix, and its 1-best is transformers' greedy search line for line (an empty source
    gives an empty output); a second run fetches nothing."""
    repo = f"tiny-org/{family}-en-ja"
    server = LoopbackServer()
    served = serve(server, repo, models[family])
    monkeypatch.setenv("MTCORE_MIRROR", server.url(""))
    doc = teacher_recipe(tmp_path, {"hf": repo, "revision": REVISION})
    recipe = write_recipe(doc, "teacher.yaml")
    try:
        for again in (False, True):  # fetched and decoded once: the second run asks nothing
            before = len(server.requests)
            done = CliRunner().invoke(cli, ["run", "-q", str(recipe), "-w", str(tmp_path / "w")])
            assert done.exit_code == 0, done.output
            assert (len(server.requests) == before) == again
    finally:
        server.close()
    asked = {path.rsplit("/", 1)[1] for path, _ in server.requests}
    assert "model.safetensors" in asked and "config.json" in asked
    assert asked <= set(served)
    (folder,) = (tmp_path / "w" / "steps").glob("teacher-*")
    meta = json.loads((folder / "model" / "artifact.json").read_text())
    assert meta["type"] == "pretrained-model" and meta["id"] == f"hf:{repo}"
    assert (
        meta["files"]["model.safetensors"]
        == hashlib.sha256(served["model.safetensors"]).hexdigest()
    )
    locked = json.loads((tmp_path / "teacher.lock").read_text())["files"]
    assert len(locked) == len(asked)
    sources = lines("test", "en", 12)
    got = output(tmp_path / "w", "bt")
    assert got[5] == "" and len(got) == 12
    expected = reference(models[family], family, sources)
    assert [g for i, g in enumerate(got) if i != 5] == [e for i, e in enumerate(expected) if i != 5]
    assert all(got[i] for i in range(12) if i != 5)  # a random model still writes something


def run_teacher(
    tmp_path: Path, write_recipe, name: str, model: dict[str, Any], **translate: Any
) -> Any:
    """``mtcore run`` of :func:`teacher_recipe` in workdir ``tmp_path/name``."""
    recipe = write_recipe(teacher_recipe(tmp_path, model, **translate), f"{name}.yaml")
    return CliRunner().invoke(cli, ["run", "-q", str(recipe), "-w", str(tmp_path / name)])


def test_a_local_directory_is_a_teacher_and_its_language_tokens_are_checked(
    models: dict[str, Path], tmp_path: Path, write_recipe
) -> None:
    """A directory id (an NLLB model) decodes as the hub id would; ``tgt_token`` picks
    another script of the target (``zho_Hant`` for a zh-TW recipe); a language the model has
    no token for is an error naming it, before any line is decoded."""
    nllb = {"id": str(models["nllb"])}
    scores = {}
    for name, token in (("w", None), ("o", "zho_Hant")):
        done = run_teacher(tmp_path, write_recipe, name, nllb, nbest=1, tgt_token=token)
        assert done.exit_code == 0, done.output
        (nbest,) = (tmp_path / name / "steps").glob("bt-*/nbest/*.jsonl")
        scores[name] = [line for line in nbest.read_text(encoding="utf-8").splitlines()]
    sources = lines("test", "en", 12)
    tok = load_tokenizer(models["nllb"])
    caps = [min(math.floor(len(tok(s)["input_ids"]) * 1.5 + 10), 62) for s in sources]
    expected = greedy(models["nllb"], sources, "zho_Hant", caps)
    got = output(tmp_path / "o", "bt")
    assert [g for i, g in enumerate(got) if i != 5] == [e for i, e in enumerate(expected) if i != 5]
    assert scores["w"] != scores["o"]  # the prefix token is the one named
    m2m = {"id": str(models["m2m100"])}
    done = run_teacher(tmp_path, write_recipe, "b", m2m, tgt="tlh")
    assert done.exit_code != 0
    assert "no language token for 'tlh'" in done.output and "tgt_token" in done.output
    # a language the model lacks, named by another's token (HW-TSC §3.3: Liv as Estonian)
    done = run_teacher(tmp_path, write_recipe, "liv", m2m, tgt="liv", tgt_token="__et__")
    assert done.exit_code == 0, done.output
    assert output(tmp_path / "liv", "bt")[0]


class Exploit:
    """Unpickling this would run a shell command."""

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, ("touch /tmp/mtcore-pwned",))


def copy_model(model: Path, dest: Path) -> Path:
    dest.mkdir()
    for path in model.iterdir():
        if path.is_file():
            (dest / path.name).write_bytes(path.read_bytes())
    return dest


def test_a_model_is_data_never_code(models: dict[str, Path], tmp_path: Path, write_recipe) -> None:
    """A config with an ``auto_map`` (the repository's own code) is refused; a pickled
    ``pytorch_model.bin`` is read with the safe loader: a plain state dict becomes safetensors
    and decodes as the safetensors model does, a pickle that would run code is refused."""
    import torch
    from safetensors.torch import load_file

    def run(model: Path, name: str, **entry: Any) -> Any:
        return run_teacher(tmp_path, write_recipe, name, {"id": str(model), **entry})

    coded = copy_model(models["marian"], tmp_path / "coded")
    config = json.loads((coded / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (coded / "config.json").write_text(json.dumps(config))
    done = run(coded, "coded")
    assert done.exit_code != 0 and "auto_map" in done.output and "never runs" in done.output

    pickled = copy_model(models["marian"], tmp_path / "pickled")
    state = load_file(str(pickled / "model.safetensors"))
    (pickled / "model.safetensors").unlink()
    torch.save(state, pickled / "pytorch_model.bin")
    assert run(pickled, "pickled", weights="bin").exit_code == 0
    assert run(models["marian"], "plain").exit_code == 0
    assert output(tmp_path / "pickled", "bt") == output(tmp_path / "plain", "bt")

    evil = copy_model(models["marian"], tmp_path / "evil")
    (evil / "model.safetensors").unlink()
    (evil / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": Exploit()}))
    done = run(evil, "evil", weights="bin")
    assert done.exit_code != 0 and "weights_only" in done.output
    assert not Path("/tmp/mtcore-pwned").exists()


def test_models_entries_are_validated_with_the_recipe(write_recipe, tmp_path: Path) -> None:
    doc = teacher_recipe(tmp_path, {"hf": "org/name", "revision": "main", "weights": "onnx"})
    doc["models"]["test"] = {"hf": "org/other"}
    doc["steps"]["teacher"] = {"kind": "translate"}
    with pytest.raises(RecipeError) as caught:
        load_recipe(write_recipe(doc), load_registry())
    text = str(caught.value)
    assert "models.teacher.weights" in text
    assert "models.test: name is also the name of a data entry" in text
    assert "steps.teacher: id is also the name of a models entry" in text


def test_the_documented_models_section_loads(write_recipe, tmp_path: Path) -> None:
    """docs/decoding.md's ``models`` example is a valid recipe section: three fetch_model
    steps and a translate step reading one of them without spm."""
    page = (ROOT / "docs" / "decoding.md").read_text(encoding="utf-8")
    section = page.split("## Pretrained models", 1)[1]
    block = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    doc = teacher_recipe(tmp_path, {"hf": "org/name"})
    doc["data"]["mono_ja"] = doc["data"].pop("test")
    doc["models"], doc["steps"] = block["models"], block["steps"]
    recipe = load_recipe(write_recipe(doc), load_registry())
    kinds = {name: spec.kind for name, spec in recipe.steps.items()}
    assert kinds == {"mono_ja": "fetch", "opus_enja": "fetch_model", "m2m": "fetch_model",
                     "nllb_local": "fetch_model", "bt_mono": "translate"}  # fmt: skip
    assert recipe.steps["m2m"].plugin.config.id == "hf:facebook/m2m100_418M"


def test_export_ctranslate2_writes_what_ctranslate2_loads_and_measures_quantization(
    models: dict[str, Path], tmp_path: Path, write_recipe
) -> None:
    """``mtcore export --format ctranslate2`` of a stage decoded by an M2M-100 teacher: a
    directory CTranslate2's own Translator loads, with the tokenizer files beside it, that
    translates the test set as the run did (float32), and ``mtcore_export.json`` with the
    search settings, the target prefix and the BLEU the quantization costs (int8 measured
    against the unquantized model on the stage's test set); over the tolerance nothing is
    written."""
    import ctranslate2

    doc = teacher_recipe(tmp_path, {"id": str(models["m2m100"])})
    doc["steps"]["eval_teacher_enja"] = {
        "kind": "evaluate",
        "inputs": {"hyp": "bt", "ref": "test"},
        "metrics": ["bleu"],
    }
    recipe = write_recipe(doc)
    work = tmp_path / "w"
    runner = CliRunner()
    done = runner.invoke(cli, ["run", "-q", str(recipe), "-w", str(work)])
    assert done.exit_code == 0, done.output
    base = ["export", str(recipe), "-w", str(work), "--format", "ctranslate2"]
    out = tmp_path / "ct2"
    done = runner.invoke(cli, [*base, "--quantization", "float32", "-o", str(out)])
    assert done.exit_code == 0, done.output
    info = json.loads((out / "mtcore_export.json").read_text())
    assert info["search"]["target_prefix"] == ["__ja__"] and info["step"] == "bt"
    assert info["quantization_check"]["loss"] == 0.0 and info["quantization_check"]["lines"] == 12
    assert {"model.bin", "sentencepiece.bpe.model", "vocab.json"} <= {p.name for p in out.iterdir()}
    # CTranslate2 and transformers alone, from the exported directory: the run's translations
    tok = load_tokenizer(out)
    tok.src_lang = "en"
    sources = lines("test", "en", 12)
    kept = [i for i in range(12) if i != 5]
    translator = ctranslate2.Translator(str(out))
    texts = []
    for i in kept:  # one at a time, each under its own cap (+ the prefix)
        ids = tok(sources[i])["input_ids"]
        (found,) = translator.translate_batch(
            [tok.convert_ids_to_tokens(ids)], target_prefix=[["__ja__"]], beam_size=1,
            min_decoding_length=2, max_decoding_length=min(math.floor(len(ids) * 1.5 + 10), 62) + 1,
        )  # fmt: skip
        tokens = tok.convert_tokens_to_ids(found.hypotheses[0][1:])
        texts.append(tok.decode(tokens, skip_special_tokens=True))
    hyps = output(work, "bt")
    assert [t.strip() for t in texts] == [hyps[i] for i in kept]
    done = runner.invoke(cli, [*base, "--quantization", "int8", "-o", str(tmp_path / "q")])
    assert done.exit_code == 0, done.output
    check = json.loads((tmp_path / "q" / "mtcore_export.json").read_text())["quantization_check"]
    assert check["quantization"] == "int8" and "BLEU" in done.output
    assert check["signature"].startswith("nrefs:1") and "tok:ja-mecab" in check["signature"]


def test_a_quantization_that_costs_more_than_the_tolerance_writes_nothing(
    models: dict[str, Path], tmp_path: Path, write_recipe
) -> None:
    """The gate itself: an export whose written model translated worse than the unquantized
    one (here its outputs cut to half) by more than the tolerance is refused, naming both
    scores, and leaves no directory."""
    from mtcore.system.inference import Translator
    from mtcore.system.model_export import export_model_format

    doc = teacher_recipe(tmp_path, {"id": str(models["marian"])})
    ref = lines("test", "ja", 12)
    doc["steps"]["eval_teacher_enja"] = {
        "kind": "evaluate", "inputs": {"hyp": "bt", "ref": "test"}, "metrics": ["bleu"],
    }  # fmt: skip
    recipe_path = write_recipe(doc)
    assert (
        CliRunner()
        .invoke(cli, ["run", "-q", str(recipe_path), "-w", str(tmp_path / "w")])
        .exit_code
        == 0
    )
    registry = load_registry()
    recipe = load_recipe(recipe_path, registry)
    system = Translator.from_run(recipe, registry, tmp_path / "w")
    step = next(r for r in system.replays if r.kind == "translate")
    real = type(step.plugin).export_model

    def worse(self, *args: Any) -> Any:
        made = real(self, *args)

        def halved(lines: list[str], exported: bool) -> list[str]:
            assert len(lines) == len(ref)  # the test set, as the run fed it
            return [r[: len(r) // 2] if exported else r for r in ref]

        made.decode = halved
        return made

    type(step.plugin).export_model = worse
    try:
        with pytest.raises(Exception) as caught:
            export_model_format(recipe, registry, system, tmp_path / "w", tmp_path / "out",
                                "ctranslate2", "int8", 1.0)  # fmt: skip
    finally:
        type(step.plugin).export_model = real
    assert "export refused" in str(caught.value) and "over the tolerance 1.0" in str(caught.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_a_masked_lm_by_id_scores_segmented_hypotheses(
    tmp_path: Path,
    write_recipe,
    monkeypatch,
    loopback,  # noqa: F811
) -> None:
    """A masked LM named by id (``{hf: ORG/NAME}``, a tiny BERT whose vocabulary is MeCab's
    words of real Japanese) is fetched as a ``masked_lm`` model and read by the ``masked_lm``
    rerank feature through the input it is connected to; ``pretokenize: words`` scores the
    hypothesis as MeCab's words joined by spaces (what a model trained on segmented text
    reads), which unsegmented input is not; a translation model in its place is refused."""
    from mtcore_plugins.common.text.tokens import tokens
    from tests.support.data import tiny_bert

    text = lines("train", "ja", 200)
    units = sorted({w for line in text for w in tokens(line, "ja")})
    model_dir = tmp_path / "bert"
    tok, model = tiny_bert(model_dir, units, hidden=32, positions=128)
    tok.save_pretrained(model_dir)
    model.save_pretrained(model_dir)
    server = LoopbackServer()
    serve(server, "tiny-org/bert-ja-words", model_dir)
    monkeypatch.setenv("MTCORE_MIRROR", server.url(""))
    doc = teacher_recipe(tmp_path, {"hf": "tiny-org/bert-ja-words", "revision": REVISION})
    doc["models"] = {"mlm_ja": doc["models"].pop("teacher")}
    doc["steps"] = {}
    try:
        recipe = write_recipe(doc, "mlm.yaml")
        done = CliRunner().invoke(cli, ["run", "-q", str(recipe), "-w", str(tmp_path / "w")])
        assert done.exit_code == 0, done.output
    finally:
        server.close()
    (fetched,) = (tmp_path / "w" / "steps").glob("mlm_ja-*/model")
    meta = json.loads((fetched / "artifact.json").read_text())
    assert (meta["task"], meta["tokenizer"]) == ("masked_lm", "BertTokenizer")
    scorers = load_registry()
    pairs = [("", line) for line in lines("test", "ja", 6)]

    def scores(model: str, resources: dict[str, Path] | None, **settings: Any) -> list[float]:
        scorer = scorers.load("scorers", "masked_lm").from_dict({"model": model, **settings})
        scorer.setup("en", "ja", resources)
        return scorer.score(pairs)

    segmented = scores("mlm_ja", {"mlm_ja": fetched}, pretokenize="words")
    by_hand = [("", " ".join(tokens(hyp, "ja"))) for _, hyp in pairs]
    plain = scorers.load("scorers", "masked_lm").from_dict({"model": str(model_dir)})
    plain.setup("en", "ja", None)
    assert segmented == pytest.approx(plain.score(by_hand), abs=1e-6)
    assert segmented != pytest.approx(scores("mlm_ja", {"mlm_ja": fetched}), abs=1e-3)
    with pytest.raises(Exception, match="not a masked LM"):
        scores("teacher", {"teacher": teacher_artifact(tmp_path)})


def teacher_artifact(tmp_path: Path) -> Path:
    """A fetched translation model's artifact directory (as the translate tests fetch one)."""
    from mtcore.contracts.step import write_artifact_meta

    where = tmp_path / "teacher_artifact"
    where.mkdir()
    write_artifact_meta(where, type="pretrained-model", task="translation",
                        model_type="marian", id="hf:org/opus-mt")  # fmt: skip
    return where


def test_mtcore_lock_records_a_models_entry_and_a_changed_file_stops_the_run(
    models: dict[str, Path],
    tmp_path: Path,
    write_recipe,
    monkeypatch,
    loopback,  # noqa: F811
) -> None:
    """``mtcore lock`` downloads every unpinned file of an hf: entry at a branch and records
    it; when the branch later serves other weights, the run stops at the sha256 the lock file
    holds instead of decoding with another model."""
    import shutil

    repo = "tiny-org/marian-en-ja"
    server = LoopbackServer()
    served = serve(server, repo, models["marian"])
    monkeypatch.setenv("MTCORE_MIRROR", server.url(""))
    recipe = write_recipe(teacher_recipe(tmp_path, {"hf": repo, "revision": REVISION}), "t.yaml")
    try:
        done = CliRunner().invoke(cli, ["lock", str(recipe)])
        assert done.exit_code == 0, done.output
        locked = json.loads((tmp_path / "t.lock").read_text())["files"]
        assert {url.rsplit("/", 1)[1] for url in locked} == set(served) - {
            "generation_config.json",
            "special_tokens_map.json",
        }
        weights = f"/huggingface.co/{repo}/resolve/{REVISION}/model.safetensors"
        server.files[weights] = models["nllb"].joinpath("model.safetensors").read_bytes()
        shutil.rmtree(tmp_path / "cache" / "downloads")
        done = CliRunner().invoke(cli, ["run", "-q", str(recipe), "-w", str(tmp_path / "w")])
        assert done.exit_code != 0 and "sha256 mismatch" in done.output
        assert "t.lock" in done.output
    finally:
        server.close()


@pytest.mark.parametrize("family", ["marian", "m2m100"])
def test_a_pretrained_model_is_a_force_decoding_rerank_feature(
    family: str, models: dict[str, Path], tmp_path: Path, write_recipe
) -> None:
    """The ``forward`` feature with a pretrained model (a rerank input connected to a
    ``models`` entry) scores log P(hypothesis | source) with CTranslate2 and the model's own
    tokenizer: the summed log-probability of the hypothesis' tokens and EOS equals what
    transformers computes for the same pairs (the target language token given, not scored;
    Marian's softmax without the <pad> that transformers adds to its vocabulary);
    the ``backward`` feature reads ja->en with M2M-100 and refuses an en->ja Marian model."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    doc = teacher_recipe(tmp_path, {"id": str(models[family])})
    doc["steps"] = {}
    done = CliRunner().invoke(cli, ["run", "-q", str(write_recipe(doc)), "-w", str(tmp_path / "w")])
    assert done.exit_code == 0, done.output
    (artifact,) = (tmp_path / "w" / "steps").glob("teacher-*/model")
    pairs = list(zip(lines("test", "en", 8), lines("test", "ja", 8), strict=True))
    registry = load_registry()
    scorer = registry.load("scorers", "forward").from_dict({"models": ["mt"], "normalize": "sum"})
    scorer.setup("en", "ja", {"mt": artifact})
    got = scorer.score(pairs)
    tok = load_tokenizer(artifact)
    model = AutoModelForSeq2SeqLM.from_pretrained(str(artifact)).eval()
    expected = []
    for source, target in pairs:
        if family == "m2m100":
            tok.src_lang, tok.tgt_lang = "en", "ja"
        ids = tok(source, return_tensors="pt")["input_ids"]
        labels = tok(text_target=target, return_tensors="pt")["input_ids"]
        start = torch.tensor([[model.config.decoder_start_token_id]])
        with torch.no_grad():
            logits = model(
                input_ids=ids, decoder_input_ids=torch.cat([start, labels[:, :-1]], 1)
            ).logits
        if family == "marian":  # Marian's vocabulary has no <pad> (CTranslate2 drops it)
            logits[..., model.config.pad_token_id] = float("-inf")
        scored = logits.log_softmax(-1)[0].gather(1, labels[0].unsqueeze(1)).squeeze(1)
        expected.append(float(scored[1:].sum() if family == "m2m100" else scored.sum()))
    assert got == pytest.approx(expected, abs=2e-3)
    backward = registry.load("scorers", "backward").from_dict({"models": ["mt"]})
    if family == "m2m100":  # one model, every direction: it reads ja->en as well
        backward.setup("en", "ja", {"mt": artifact})
        assert len(backward.score(pairs)) == len(pairs)
        return
    with pytest.raises(Exception, match="translates en->ja, not ja->en"):
        backward.setup("en", "ja", {"mt": artifact})


def test_a_local_model_is_identified_by_the_files_it_reads(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """A directory entry's step identity follows the content of the files fetch_model reads:
    new weights change it, an unrelated file beside them (a Flax copy, a README) does not."""
    from mtcore_plugins.steps.fetch_model import FetchModelStep

    local = copy_model(models["marian"], tmp_path / "local")
    step = FetchModelStep.from_dict({"id": str(local)})
    registry = load_registry()
    before = step.fingerprint(registry)
    assert "model.safetensors" in before and "source.spm" in before
    (local / "flax_model.msgpack").write_bytes(b"\0" * 64)
    assert step.fingerprint(registry) == before
    (local / "model.safetensors").write_bytes(
        models["nllb"].joinpath("model.safetensors").read_bytes()
    )
    assert step.fingerprint(registry) != before

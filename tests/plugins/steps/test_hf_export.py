"""``mtcore export --format huggingface`` (a transformers directory) on real en-ja lines: micro
fairseq models trained here, post-norm written as Marian and pre-norm as M2M-100, loaded back by
transformers from the directory alone (``pipeline("translation")``, ``AutoTokenizer``),
translate the dev lines as the translate step does (greedy, and beam search with its cache and
an n-gram block), make fairseq's ids and give its log-probabilities; a cached decode unlike
fairseq's is refused; what transformers cannot express (relative positions, an ensemble,
separate embeddings where the target shares them) and int8 are refused by name; and through the
CLI, a pretrained M2M-100 teacher's stage is written float32 by default, with a model card."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.errors import DataError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact
from mtcore_plugins.steps._hf_fairseq import load_fairseq, unsupported
from mtcore_plugins.steps.binarize import BinarizeStep
from mtcore_plugins.steps.spm import SentencePieceStep
from mtcore_plugins.steps.translate import TranslateStep
from tests.plugins.steps.test_decoding import MICRO, train, translate
from tests.plugins.steps.test_fairseq_steps import DATA, EDGE, write_corpus
from tests.support.data import ENJA
from tests.support.steps import make_ctx

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA}")
os.environ.setdefault("OMP_NUM_THREADS", "1")

LINES = 40  # real dev sentences the exported models translate
PRE_NORM = ["--encoder-normalize-before", "--decoder-normalize-before"]
# 60 updates at twice MICRO's rate: outputs of words and EOS, varying with the source (at
# MICRO's rate, runs of a bare "▁" that decode to nothing)
TRAINED = {"max_update": 60, "save_interval_updates": 60, "max_tokens": 2048, "dropout": 0.0,
           "lr": 0.006}  # fmt: skip
BRIEF = {"max_update": 2, "save_interval_updates": 2}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """test_decoding's data (1,000 real pairs, SentencePiece, binarized); micro models of 60
    updates, post-norm with every embedding shared (Marian) and pre-norm (M2M-100); a
    right-to-left one of 40 with separate source embeddings (NT5's
    --share-decoder-input-output-embed: Marian's separate vocabularies);
    2-update ones transformers cannot express (encoder RPE; pre-norm with separate
    embeddings); real dev lines and a private conversion cache."""
    root = tmp_path_factory.mktemp("hf")
    saved = os.environ.get("MTCORE_CACHE")
    os.environ["MTCORE_CACHE"] = str(root / "cache")
    found = {
        "train": write_corpus(root / "train", "train", 1000, []),
        "valid": write_corpus(root / "valid", "dev", 60, []),
        "dev": write_corpus(root / "dev", "dev", LINES, EDGE),
    }
    SentencePieceStep.from_dict({"vocab_size": 1000, "num_threads": 1}).run(
        make_ctx(root / "spm", "spm", corpus=found["train"])
    )
    found["spm"] = root / "spm" / "model"
    ctx = make_ctx(
        root / "bin", "binarize", train=found["train"], valid=found["valid"], spm=found["spm"]
    )
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(ctx)
    data = root / "bin" / "data"
    found["post"] = train(root / "post", {**MICRO, **TRAINED}, data)
    split = {"share_all_embeddings": False, "extra_args": ["--share-decoder-input-output-embed"]}
    r2l = {"direction": "r2l", "max_update": 40, "save_interval_updates": 40, "lr": 0.01}
    found["split_r2l"] = train(root / "split_r2l", {**MICRO, **TRAINED, **split, **r2l}, data)
    found["pre"] = train(root / "pre", {**MICRO, **TRAINED, "extra_args": PRE_NORM}, data)
    rpe = {"arch": "mtcore_nt5_rpe_tiny", "models": ["rpe"], **BRIEF}
    found["rpe"] = train(root / "rpe", {**MICRO, **rpe}, data)
    pre_split = {"share_all_embeddings": False, "extra_args": PRE_NORM, **BRIEF}
    found["pre_split"] = train(root / "pre_split", {**MICRO, **pre_split}, data)
    yield found
    if saved is None:
        os.environ.pop("MTCORE_CACHE", None)
    else:
        os.environ["MTCORE_CACHE"] = saved


def export(setup: dict[str, Path], model: str, out: Path, dtype: str = "float32", **search: Any):
    step = TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 1, **search})
    inputs = {"model": Artifact.open(setup[model]), "spm": Artifact.open(setup["spm"])}
    return step.export_model(inputs, "huggingface", out, dtype, load_registry())


def dev_lines(setup: dict[str, Path]) -> list[str]:
    return (setup["dev"] / "corpus.en").read_text(encoding="utf-8").split("\n")[:LINES]


def standalone(out: Path, lines: list[str], r2l: bool, **search: Any) -> list[str]:
    """The directory alone through ``pipeline("translation")``, given the step's cap (1.5 *
    ids + 10, at most positions - 2) as ``max_new_tokens`` (the model card's advice) and
    ``search``; a right-to-left model's pieces put back in order."""
    from transformers import pipeline

    translate = pipeline("translation", model=str(out))
    tokenizer = translate.tokenizer
    positions = json.loads((out / "config.json").read_text())["max_position_embeddings"]
    got = []
    for line in lines:
        ids = tokenizer(line)["input_ids"]
        if ids == [2]:  # the step's empty output for an empty source
            got.append("")
            continue
        cap = min(math.floor(len(ids) * 1.5 + 10), positions - 2)
        (found,) = translate(line, max_new_tokens=cap + 1, return_tensors=r2l, **search)
        if r2l:
            output = [i for i in found["translation_token_ids"].tolist() if i > 3]
            pieces = tokenizer.convert_ids_to_tokens(output)[::-1]
            got.append(tokenizer.convert_tokens_to_string(pieces))
        else:
            got.append(found["translation_text"])
    return got


@pytest.mark.parametrize(
    ("model", "architecture"),
    [
        ("post", "MarianMTModel"),  # every embedding shared (the default)
        ("split_r2l", "MarianMTModel"),  # separate source embeddings, r2l
        ("pre", "M2M100ForConditionalGeneration"),
    ],
)
def test_the_written_directory_translates_as_the_step_does(
    setup: dict[str, Path], tmp_path: Path, model: str, architecture: str
) -> None:
    """transformers alone, from the directory: the step's greedy output (fairseq, its default
    backend) line for line through ``pipeline("translation")``, and fairseq's
    log-probabilities of the references; the export's own decodes (generate on the directory;
    the step's CTranslate2 float32) agree."""
    import sentencepiece as spm
    import torch
    from transformers import AutoModelForSeq2SeqLM

    data = {**setup, "test": setup["dev"], "model": setup[model]}
    _, expected, _ = translate(data, tmp_path / "run", beam=1)
    out = tmp_path / "hf"
    made = export(setup, model, out)
    assert made.info["architecture"] == architecture and made.info["quantization"] == "float32"
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "vocab.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    } == {p.name for p in out.iterdir()}  # one dictionary: split_r2l's two are equal
    # one set of search settings: generation_config.json's
    config = json.loads((out / "config.json").read_text())
    assert not {"num_beams", "max_length", "length_penalty"} & set(config)
    lines = dev_lines(setup)
    assert made.info["direction"] == ("r2l" if model == "split_r2l" else "l2r")
    # transformers' translation pipeline searches with 4 beams unless told (the model card
    # says so for a greedy step): generation_config.json's num_beams 1 is its default value
    got = standalone(out, lines, made.info["direction"] == "r2l", num_beams=1)
    assert got == [line.strip() for line in expected[:LINES]]  # MarianTokenizer strips
    assert made.decode(lines, True) == got and made.decode(lines, False) == expected[:LINES]
    # forced decoding of the references: fairseq's log-probabilities within 1e-4
    loaded, task, _ = load_fairseq(
        Artifact.open(setup[model]), "en", "ja", ["transformer_presets"], load_registry()
    )
    written = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    pieces = spm.SentencePieceProcessor(model_file=str(out / "source.spm"))
    refs = (setup["dev"] / "corpus.ja").read_text(encoding="utf-8").split("\n")[:LINES]
    worst = 0.0
    for line, ref in zip(lines, refs, strict=True):
        if not line.strip() or not ref.strip():
            continue
        src = task.source_dictionary.encode_line(
            " ".join(pieces.encode(line, out_type=str)), add_if_not_exist=False
        ).long()[None]
        tgt = task.target_dictionary.encode_line(
            " ".join(pieces.encode(ref, out_type=str)), add_if_not_exist=False
        ).long()[None]
        prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)  # EOS first, as fairseq feeds it
        with torch.no_grad():
            theirs = loaded.get_normalized_probs(
                loaded(src, torch.tensor([src.shape[1]]), prev), log_probs=True
            ).gather(-1, tgt[..., None])
            ours = written(input_ids=src, decoder_input_ids=prev, use_cache=False).logits
            ours = ours.log_softmax(-1).gather(-1, tgt[..., None])
        worst = max(worst, float((theirs - ours).abs().max()))
    assert worst < 1e-4


@pytest.mark.parametrize("model", ["post", "pre"])
def test_beam_search_with_the_cache_and_an_ngram_block_is_the_steps(
    setup: dict[str, Path], tmp_path: Path, model: str
) -> None:
    """Beam 4 and a trigram block (NT5's ft search): ``pipeline("translation")``, its search
    from generation_config.json and its cache on, gives the step's fairseq output."""
    search = {"beam": 4, "no_repeat_ngram_size": 3}
    data = {**setup, "test": setup["dev"], "model": setup[model]}
    _, expected, _ = translate(data, tmp_path / "run", **search)
    out = tmp_path / "hf"
    made = export(setup, model, out, **search)
    assert made.info["fairseq"]["probe_searches"] == 3
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["no_repeat_ngram_size"] == 3
    assert generation.get("use_cache", True) is True
    got = standalone(out, dev_lines(setup), False)
    assert got == [line.strip() for line in expected[:LINES]]  # MarianTokenizer strips


@pytest.mark.parametrize("model", ["post", "split_r2l"])
def test_auto_tokenizer_makes_fairseqs_ids_and_text(
    setup: dict[str, Path], tmp_path: Path, model: str
) -> None:
    """``AutoTokenizer.from_pretrained(DIR)``: fairseq's ids (the pieces' in the source
    dictionary, EOS last) of English and unsegmented Japanese lines, and the target
    dictionary's ids back to SentencePiece's text."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    out = tmp_path / "hf"
    export(setup, model, out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert type(tokenizer).__name__ == "MarianTokenizer"
    _, task, _ = load_fairseq(
        Artifact.open(setup[model]), "en", "ja", ["transformer_presets"], load_registry()
    )
    model_file = Artifact.open(setup["spm"]).file("model", "spm.model")
    pieces = spm.SentencePieceProcessor(model_file=str(model_file))
    english = dev_lines(setup)
    japanese = (setup["dev"] / "corpus.ja").read_text(encoding="utf-8").split("\n")[:LINES]
    decoded = 0
    for line in [*english, *japanese]:
        split = pieces.encode(line, out_type=str)
        ids = task.source_dictionary.encode_line(" ".join(split), add_if_not_exist=False)
        assert tokenizer(line)["input_ids"] == ids.tolist()
        target = task.target_dictionary.encode_line(" ".join(split), add_if_not_exist=False)
        if 3 not in target.tolist():  # an unknown piece decodes to nothing
            text = tokenizer.decode(target.tolist(), skip_special_tokens=True)
            assert text == pieces.decode_pieces(split)
            decoded += 1
    assert decoded >= LINES


def test_a_cached_decode_unlike_fairseqs_is_refused(
    setup: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export's own beam search through ``generate`` (its cache on) is part of the check:
    Marian's positions planted as FSMT's (a cached step reads the first position), which
    forced log-probabilities cannot see, make the export refuse."""
    from transformers.models.marian import modeling_marian

    table = modeling_marian.MarianSinusoidalPositionalEmbedding
    forward = table.forward

    def first(self: Any, shape: Any, past_key_values_length: int = 0, position_ids: Any = None):
        return forward(self, shape, 0, None)  # from 0, whatever the cache holds

    monkeypatch.setattr(table, "forward", first)
    with pytest.raises(DataError, match="generate gives other ids than fairseq's beam search"):
        export(setup, "post", tmp_path / "hf", beam=4)
    monkeypatch.setattr(table, "forward", forward)
    export(setup, "post", tmp_path / "fine", beam=4)


def test_half_precision_is_saved_so_and_int8_is_refused(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """float16 weights are written as float16 (half the bytes) and still translate like the
    float32 model on a CPU; int8 is CTranslate2's and refused with the valid types named."""
    lines = dev_lines(setup)
    export(setup, "pre", tmp_path / "f32")
    half = export(setup, "pre", tmp_path / "f16", "float16", beam=4)
    sizes = [(tmp_path / name / "model.safetensors").stat().st_size for name in ("f16", "f32")]
    assert sizes[0] < sizes[1] * 0.55
    assert json.loads((tmp_path / "f16" / "config.json").read_text())["dtype"] == "float16"
    assert half.info["search"]["beam_size"] == 4
    generation = json.loads((tmp_path / "f16" / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["early_stopping"] is True
    same = sum(
        a == b for a, b in zip(half.decode(lines, True), half.decode(lines, False), strict=True)
    )
    assert same >= 0.9 * LINES  # against the step's float32 beam search
    with pytest.raises(DataError, match="float32, float16 or bfloat16"):
        export(setup, "pre", tmp_path / "q", "int8")
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("rpe", "relative positions"),
        ("pre_split", "separate source and target embeddings in a pre-norm model"),
    ],
)
def test_what_transformers_cannot_express_is_refused_before_anything_is_written(
    setup: dict[str, Path], tmp_path: Path, model: str, message: str
) -> None:
    with pytest.raises(DataError, match=f"transformers cannot express this model: .*{message}"):
        export(setup, model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_ensemble_is_refused(setup: dict[str, Path], tmp_path: Path) -> None:
    step = TranslateStep.from_dict({"src": "en", "tgt": "ja"})
    pair = {
        "model": Artifact.open(setup["post"]),
        "model2": Artifact.open(setup["post"]),
        "spm": Artifact.open(setup["spm"]),
    }
    with pytest.raises(DataError, match="an ensemble of 2 models"):
        step.export_model(pair, "huggingface", tmp_path / "e", "float32", load_registry())


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        # FSMT is post-norm on both sides, M2M-100 pre-norm on both
        ({"encoder_normalize_before": True}, "pre-norm layers on one side"),
        # FSMT's decoder input and output embeddings are one tensor
        ({"share_all_embeddings": False}, "separate decoder input and output embeddings"),
        # both have fairseq's sinusoidal positions, never learned ones
        ({"decoder_learned_pos": True}, "learned decoder positions"),
        ({"layernorm_embedding": True}, "a layer norm over the embeddings"),
        ({"activation_fn": "relu_squared"}, "activation 'relu_squared'"),
        ({"scale_attn": True}, "NormFormer scaling"),
        ({"decoder_output_dim": 128}, "input or output dimension"),
    ],
)
def test_checkpoint_arguments_transformers_cannot_express(
    args: dict[str, Any], reason: str
) -> None:
    base = {
        "arch": "transformer",
        "share_all_embeddings": True,
        "encoder_embed_dim": 64,
        "decoder_embed_dim": 64,
    }
    assert unsupported(base, "transformer") == []
    assert any(reason in r for r in unsupported({**base, **args}, "transformer"))
    assert unsupported(base, "lstm") == [
        "fairseq model 'lstm' (expressible: transformer, mtcore_transformer) [arch transformer]"
    ]


def test_the_cli_writes_a_pretrained_teacher_float32_by_default(
    tmp_path: Path, write_recipe: Any
) -> None:
    """A stage decoded by a tiny M2M-100 teacher: ``--format huggingface`` with no
    ``--quantization`` writes float32, which transformers' AutoModelForSeq2SeqLM and
    AutoTokenizer load from the directory and which gives the run's translations (the target
    language forced by generation_config.json); int8 is refused; ctranslate2 still defaults to
    int8."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from tests.support.tiny_pretrained import build

    def lines(split: str, lang: str, n: int) -> list[str]:
        return (ENJA / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:n]

    teacher = build(
        "m2m100", lines("train", "en", 400) + lines("train", "ja", 400), tmp_path / "m2m100", seed=2
    )
    sources, refs = lines("test", "en", 12), lines("test", "ja", 12)
    (tmp_path / "t.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "t.ja").write_text("\n".join(refs) + "\n", encoding="utf-8")
    files = {"en": str(tmp_path / "t.en"), "ja": str(tmp_path / "t.ja")}
    recipe = write_recipe(
        {
            "name": "teacher",
            "directions": ["en-ja"],
            "executor": {"workers": 1},
            "data": {"test": {"source": "local", "files": files}},
            "models": {"teacher": {"id": str(teacher)}},
            "steps": {
                "bt": {
                    "kind": "translate",
                    "inputs": {"model": "teacher", "corpus": "test"},
                    "src": "en",
                    "tgt": "ja",
                    "beam": 1,
                },
                "eval_teacher_enja": {
                    "kind": "evaluate",
                    "inputs": {"hyp": "bt", "ref": "test"},
                    "metrics": ["bleu"],
                },
            },
        }
    )
    work, runner = tmp_path / "w", CliRunner()
    done = runner.invoke(cli, ["run", "-q", str(recipe), "-w", str(work)])
    assert done.exit_code == 0, done.output
    base = ["export", str(recipe), "-w", str(work), "--format"]
    out = tmp_path / "hf"
    done = runner.invoke(cli, [*base, "huggingface", "-o", str(out)])
    assert done.exit_code == 0, done.output
    info = json.loads((out / "mtcore_export.json").read_text())
    assert info["quantization"] == "float32" and info["quantization_check"]["loss"] == 0.0
    # the model card: the Hub's metadata with the stage's score and its signature
    card = (out / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["language"] == ["en", "ja"] and meta["pipeline_tag"] == "translation"
    (metric,) = meta["model-index"][0]["results"][0]["metrics"]
    assert metric["name"] == "BLEU" and metric["value"] == round(info["scores"]["BLEU"]["score"], 2)
    assert metric["args"]["signature"].startswith("nrefs:1|")
    assert 'pipeline("translation"' in card and "## Not included" in card
    assert info["architecture"] == "M2M100ForConditionalGeneration" and info["step"] == "bt"
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    tok.src_lang = "en"
    got = []
    for line in sources:
        ids = tok(line, return_tensors="pt")["input_ids"]
        cap = min(math.floor(ids.shape[1] * 1.5 + 10), 62)
        with torch.no_grad():  # the language token, the cap, EOS
            row = model.generate(ids, max_new_tokens=cap + 2)[0]
        assert int(row[1]) == tok.convert_tokens_to_ids("__ja__")
        got.append(tok.decode(row, skip_special_tokens=True).strip())
    (hyp,) = (work / "steps").glob("bt-*/hyp/hyp.ja")
    assert got == hyp.read_text(encoding="utf-8").splitlines()
    done = runner.invoke(
        cli, [*base, "huggingface", "--quantization", "int8", "-o", str(out) + "8"]
    )
    assert done.exit_code != 0 and "float32, float16 or bfloat16" in done.output
    assert not Path(str(out) + "8").exists()
    done = runner.invoke(cli, [*base, "ctranslate2", "-o", str(tmp_path / "ct2")])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "ct2" / "mtcore_export.json").read_text())["quantization"] == (
        "int8"
    )

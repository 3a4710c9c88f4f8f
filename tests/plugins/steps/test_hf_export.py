"""``mtcore export --format huggingface`` (a transformers directory) on real en-ja lines: micro
fairseq models trained here, post-norm written as FSMT and pre-norm as M2M-100, loaded back by
transformers from the directory alone, translate the dev lines as the translate step does and
give fairseq's log-probabilities; what transformers cannot express (relative positions, an
ensemble, separate embeddings where the target shares them) and int8 are refused by name; and
through the CLI, a pretrained M2M-100 teacher's stage is written float32 by default."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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
    updates, post-norm with every embedding shared (FSMT) and pre-norm (M2M-100); a
    right-to-left one of 40 with separate source embeddings (NT5's
    --share-decoder-input-output-embed: FSMT untied);
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


def standalone(out: Path, lines: list[str], r2l: bool) -> list[str]:
    """The directory alone, used as mtcore_export.json's ``tokenizer`` says: sentencepiece
    pieces, their ids in source_vocab.json and EOS; ``generate`` under the step's cap (1.5 *
    ids + 10, EOS forced there); output ids to pieces by target_vocab.json (a right-to-left
    model's reversed)."""
    import sentencepiece as spm
    import torch
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    pieces = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    source = json.loads((out / "source_vocab.json").read_text(encoding="utf-8"))
    target = {i: p for p, i in json.loads((out / "target_vocab.json").read_text()).items()}
    positions = json.loads((out / "config.json").read_text())["max_position_embeddings"]
    got = []
    for line in lines:
        ids = [source.get(p, 3) for p in pieces.encode(line, out_type=str)]
        if not ids:  # the step's empty output for an empty source
            got.append("")
            continue
        ids.append(2)
        cap = min(math.floor(len(ids) * 1.5 + 10), positions - 2)
        with torch.no_grad():
            (row,) = model.generate(torch.tensor([ids]), max_new_tokens=cap + 1).tolist()
        tokens = row[1:]
        tokens = tokens[: tokens.index(2)] if 2 in tokens else tokens
        found = [target[i] for i in tokens]
        got.append(pieces.decode_pieces(found[::-1] if r2l else found))
    return got


@pytest.mark.parametrize(
    ("model", "architecture"),
    [
        ("post", "FSMTForConditionalGeneration"),  # every embedding shared (the default)
        ("split_r2l", "FSMTForConditionalGeneration"),  # separate source embeddings, r2l
        ("pre", "M2M100ForConditionalGeneration"),
    ],
)
def test_the_written_directory_translates_as_the_step_does(
    setup: dict[str, Path], tmp_path: Path, model: str, architecture: str
) -> None:
    """transformers alone, from the directory: the step's greedy output (fairseq, its default
    backend) line for line, and fairseq's log-probabilities of the references; the export's
    own decodes (generate on the directory; the step's CTranslate2 float32) agree."""
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
        "spm.model",
        "source_vocab.json",
        "target_vocab.json",
    } == {p.name for p in out.iterdir()}
    lines = dev_lines(setup)
    assert made.info["direction"] == ("r2l" if model == "split_r2l" else "l2r")
    assert standalone(out, lines, made.info["direction"] == "r2l") == expected[:LINES]
    assert made.decode(lines, True) == expected[:LINES] == made.decode(lines, False)
    # forced decoding of the references: fairseq's log-probabilities within 1e-4
    loaded, task, _ = load_fairseq(
        Artifact.open(setup[model]), "en", "ja", ["transformer_presets"], load_registry()
    )
    written = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    pieces = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
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

"""A pretrained M2M-100 / NLLB model continued by fairseq (HW-TSC §3.3/§5.3): ``binarize`` with
the model as ``spm`` (its SentencePiece model, its fixed dictionary, language tokens on both
sides), ``train`` with it as ``init`` (its weights as a fairseq transformer), and the trained
model decoded with its tokens. Tiny random models built with transformers' own classes
(tests/support/tiny_pretrained.py) on real en-ja lines."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import ctranslate2
import pytest
from click.testing import CliRunner

from mtcore.api import Artifact, DataError
from mtcore.cli.app import cli
from mtcore.contracts.registry import load_registry
from mtcore.data.corpus import Corpus
from mtcore.recipe.load import load_recipe
from mtcore_plugins.common.decoding.translator import check_members
from mtcore_plugins.common.hub.pretrained import load_tokenizer
from mtcore_plugins.steps._pretrained_init import LanguageTokens
from mtcore_plugins.steps.binarize import BinarizeStep
from mtcore_plugins.steps.translate import TranslateStep
from tests.plugins.common.test_pretrained import lines, models  # noqa: F401 (a fixture)
from tests.support import ROOT
from tests.support.data import ENJA
from tests.support.steps import make_ctx
from tests.support.tiny_pretrained import build, greedy

pytestmark = pytest.mark.skipif(not ENJA.is_dir(), reason=f"real data not found at {ENJA}")
TARGET = {"m2m100": "__ja__", "nllb": "jpn_Jpan"}


def write_pairs(folder: Path, name: str, src: list[str], tgt: list[str]) -> dict[str, str]:
    files = {}
    for lang, text in (("en", src), ("ja", tgt)):
        path = folder / f"{name}.{lang}"
        path.write_text("\n".join(text) + "\n", encoding="utf-8")
        files[lang] = str(path)
    return files


def recipe(tmp_path: Path, model: Path, **train: Any) -> dict[str, Any]:
    """en->ja: 300 real training pairs binarized by the pretrained model's tokenizer, the model
    continued on them and translating 12 real test lines (one empty) greedily."""
    test_src = lines("test", "en", 12)
    test_src[5] = ""
    data = {
        "train": write_pairs(
            tmp_path, "train", lines("train", "en", 300), lines("train", "ja", 300)
        ),
        "valid": write_pairs(tmp_path, "valid", lines("dev", "en", 40), lines("dev", "ja", 40)),
        "test": write_pairs(tmp_path, "test", test_src, lines("test", "ja", 12)),
    }
    return {
        "name": "continued",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {
            name: {"source": "local", "files": files, "input": {"empty": "keep"}}
            for name, files in data.items()
        },
        "models": {"m2m": {"id": str(model)}},
        "steps": {
            "bin": {
                "kind": "binarize",
                "inputs": {"train": "train", "valid": "valid", "spm": "m2m"},
                "src": "en",
                "tgt": "ja",
            },
            "cont": {
                "kind": "train",
                "inputs": {"data": "bin", "init": "m2m"},
                **{"arch": "transformer", "max_update": 4, "max_tokens": 2000, "threads": 1},
                **{"lr_scheduler": "fixed", "warmup_updates": 0, "save_interval_updates": 2},
                **train,
            },
            "tr": {
                "kind": "translate",
                "inputs": {"model": "cont", "corpus": "test"},
                **{"src": "en", "tgt": "ja", "beam": 1},
            },
        },
    }


def run(tmp_path: Path, write_recipe, name: str, doc: dict[str, Any]) -> Any:
    path = write_recipe(doc, f"{name}.yaml")
    return CliRunner().invoke(cli, ["run", "-q", str(path), "-w", str(tmp_path / name)])


def step_dir(work: Path, step: str) -> Path:
    (folder,) = (work / "steps").glob(f"{step}-*")
    return folder


def output(work: Path, step: str) -> list[str]:
    corpus = Corpus.open(step_dir(work, step) / "hyp")
    return corpus.file(corpus.langs[0]).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("family", list(TARGET))
def test_a_continued_model_starts_as_the_pretrained_model_translates(
    family: str,
    models: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    write_recipe,
) -> None:
    """Trained with a learning rate too small to move a weight, the continued fairseq model
    translates the real test lines as transformers' greedy search of the pretrained model
    does, line for line: the dictionary, the weights, the network's shape and the language
    tokens all carried over. The data's sources start with the source language token and its
    targets with the target's; the dictionary is the model's, in its order."""
    done = run(tmp_path, write_recipe, "w", recipe(tmp_path, models[family], lr=1e-12))
    assert done.exit_code == 0, done.output
    work = tmp_path / "w"
    data = step_dir(work, "bin") / "data"
    meta = json.loads((data / "artifact.json").read_text())
    source_token = "__en__" if family == "m2m100" else "eng_Latn"
    assert meta["language_tokens"] == {"src": source_token, "tgt": TARGET[family]}
    tok = load_tokenizer(models[family])
    config = json.loads((models[family] / "config.json").read_text())
    symbols = (data / "dict.en.txt").read_text(encoding="utf-8").splitlines()
    assert len(symbols) + 4 == config["vocab_size"] == meta["pretrained"]["dict_size"]
    for index in (4, 100, tok.convert_tokens_to_ids(TARGET[family])):
        assert symbols[index - 4].split(" ")[0] == tok.convert_ids_to_tokens(index)
    model = json.loads((step_dir(work, "cont") / "model" / "artifact.json").read_text())
    assert model["language_tokens"] == meta["language_tokens"] and model["arch"] == "transformer"
    sources = lines("test", "en", 12)
    caps = [min(math.floor(len(tok(s)["input_ids"]) * 1.5 + 10), 62) for s in sources]
    expected = greedy(models[family], sources, TARGET[family], caps)
    got = output(work, "tr")
    assert got[5] == "" and len(got) == 12
    assert [g for i, g in enumerate(got) if i != 5] == [e for i, e in enumerate(expected) if i != 5]


def test_continuing_learns_the_data_and_refuses_what_does_not_fit(
    models: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    write_recipe,
) -> None:
    """Trained for real, the continued model's dev loss falls from the pretrained model's; a
    fairseq arch other than fairseq's own transformer, a model without language tokens for the
    data and data binarized by another tokenizer are refused with what to set."""
    doc = recipe(tmp_path, models["m2m100"], lr=0.003, max_update=30, save_interval_updates=30)
    done = run(tmp_path, write_recipe, "w", doc)
    assert done.exit_code == 0, done.output
    log = (step_dir(tmp_path / "w", "cont") / "model" / "train.log").read_text()
    losses = [json.loads(line.split("|")[-1])["valid_loss"] for line in log.splitlines()
              if '"valid_loss"' in line]  # fmt: skip
    assert losses
    changed = output(tmp_path / "w", "tr")
    doc = recipe(tmp_path, models["m2m100"], lr=1e-12, max_update=30, save_interval_updates=30)
    done = run(tmp_path, write_recipe, "z", doc)
    assert done.exit_code == 0, done.output
    log = (step_dir(tmp_path / "z", "cont") / "model" / "train.log").read_text()
    start = [json.loads(line.split("|")[-1])["valid_loss"] for line in log.splitlines()
             if '"valid_loss"' in line]  # fmt: skip
    assert float(losses[-1]) < float(start[-1]) - 0.5
    assert changed != output(tmp_path / "z", "tr")
    # exported for CTranslate2: its own Translator, with the tokenizer written beside the
    # model, the source token first and the target's as prefix, translates as the step did
    step = TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 1})
    unmoved = {"model": Artifact.open(step_dir(tmp_path / "z", "cont") / "model")}
    made = step.export_model(unmoved, "ctranslate2", tmp_path / "ct2", "float32", load_registry())
    sources = lines("test", "en", 12)
    expected = output(tmp_path / "z", "tr")
    assert made.decode(sources, True)[:5] == expected[:5]
    assert made.info["search"]["target_prefix"] == ["__ja__"]
    native = ctranslate2.Translator(str(tmp_path / "ct2"))
    tok = load_tokenizer(tmp_path / "ct2")
    for line, hyp in list(zip(sources, expected, strict=True))[:3]:
        source = ["__en__", *tok.sp_model.encode(line, out_type=str)]
        cap = min(math.floor((len(source) + 1) * 1.5 + 10), made.info["positions"]["target"] - 2)
        (found,) = native.translate_batch(
            [source], target_prefix=[["__ja__"]], beam_size=1,
            max_decoding_length=cap + 1, min_decoding_length=2,
        )  # fmt: skip
        ids = tok.convert_tokens_to_ids(found.hypotheses[0][1:])
        assert tok.decode(ids, skip_special_tokens=True).strip() == hyp
    continued = {"model": Artifact.open(step_dir(tmp_path / "w", "cont") / "model")}
    with pytest.raises(DataError, match="reads its language tokens, which only the translate"):
        check_members("en", "ja", {}, "forward", continued)  # the SentencePiece readers' check
    wrong = recipe(tmp_path, models["m2m100"], arch="mtcore_transformer_tiny")
    done = run(tmp_path, write_recipe, "a", wrong)
    assert done.exit_code != 0 and "set arch: transformer" in done.output
    data = step_dir(tmp_path / "w", "bin") / "data"  # any artifact: refused before reading
    with pytest.raises(DataError, match="are for a pretrained model as spm"):
        BinarizeStep.from_dict({"src": "en", "tgt": "ja", "oov": "rare"}).run(
            make_ctx(tmp_path / "b", "binarize", train=data, valid=data,
                     spm=step_dir(tmp_path / "w", "cont") / "model")
        )  # fmt: skip
    wrong = recipe(tmp_path, models["m2m100"])
    wrong["steps"]["bin"]["tgt_token"] = "__tlh__"
    done = run(tmp_path, write_recipe, "t", wrong)
    assert done.exit_code != 0 and "'__tlh__' is not one of the model's" in done.output
    wrong = recipe(tmp_path, models["m2m100"])
    wrong["models"]["other"] = {"id": str(models["nllb"])}
    wrong["steps"]["cont"]["inputs"]["init"] = "other"
    done = run(tmp_path, write_recipe, "o", wrong)
    assert done.exit_code != 0 and "not binarized with its tokenizer" in done.output


LIVEN = ENJA.parents[1] / "en-liv" / "wmt-conference+wmt22-news-systems" / "txt"
LIVONIAN = set("āēīōūȯȱǟõäöüšžņļŗțḑ")
"""Letters of Livonian's alphabet an English SentencePiece model has not seen."""


def livonian(start: int, end: int) -> tuple[list[str], list[str]]:
    en = (LIVEN / "sources" / "generaltest2022.en-liv.src.en").read_text(encoding="utf-8")
    liv = (LIVEN / "references" / "generaltest2022.en-liv.ref.A.liv").read_text(encoding="utf-8")
    return en.splitlines()[start:end], liv.splitlines()[start:end]


@pytest.mark.skipif(not LIVEN.is_dir(), reason=f"real data not found at {LIVEN}")
def test_livonian_tagged_as_estonian_with_its_unknown_pieces_on_rare_rows(
    tmp_path: Path, write_recipe
) -> None:
    """HW-TSC §3.3 on real WMT22 En-Liv lines: the model has no Livonian, so Livonian is tagged
    with Estonian's token, and the pieces of Livonian text its dictionary lacks (letters such
    as ō and ļ) take over the rows of its rarest entries (``oov: rare``) instead of becoming
    <unk>; the continued model writes those letters."""
    text = lines("train", "en", 400) + lines("train", "ja", 400)
    model = build("m2m100", text, tmp_path / "m2m100", seed=2, max_position_embeddings=256)
    doc = recipe(
        tmp_path, model, lr=0.003, max_update=60, save_interval_updates=60, too_long="skip"
    )
    files = {
        name: write_pairs(tmp_path, name, *livonian(a, b))
        for name, (a, b) in {"train": (0, 300), "valid": (300, 340), "test": (340, 352)}.items()
    }
    for name, pair in files.items():
        doc["data"][name]["files"] = {"en": pair["en"], "liv": pair["ja"]}
    doc["directions"] = ["en-liv"]
    for step in ("bin", "tr"):
        doc["steps"][step]["tgt"] = "liv"
    doc["steps"]["bin"].update(tgt_token="__et__", oov="rare")
    doc["steps"]["tr"]["tgt_token"] = "__et__"  # what the model was trained with: checked
    doc["steps"]["unk"] = {**doc["steps"]["bin"], "oov": "unk"}
    done = run(tmp_path, write_recipe, "w", doc)
    assert done.exit_code == 0, done.output
    work = tmp_path / "w"
    replaced = {}
    for step in ("bin", "unk"):  # fairseq-preprocess: "[liv] ...: 300 sents, N tokens, X% replaced"
        log = (step_dir(work, step) / "data" / "binarize.log").read_text(encoding="utf-8")
        found = re.search(r"\[liv\] \S+train\.liv: 300 sents, \d+ tokens, ([\d.]+)% replaced", log)
        assert found, log
        replaced[step] = float(found.group(1))
    assert replaced["bin"] == 0.0 and replaced["unk"] > 10.0  # a fifth of Livonian's pieces
    meta = json.loads((step_dir(work, "bin") / "data" / "artifact.json").read_text())
    assert meta["language_tokens"] == {"src": "__en__", "tgt": "__et__"}
    assert meta["pretrained"]["oov_rows_borrowed"] > 20
    dictionary = step_dir(work, "bin") / "data" / "dict.liv.txt"
    symbols = [line.split(" ")[0] for line in dictionary.read_text().splitlines()]
    before = [line.split(" ")[0] for line in (step_dir(work, "unk") / "data" / "dict.liv.txt")
              .read_text().splitlines()]  # fmt: skip
    moved = [i for i, (a, b) in enumerate(zip(symbols, before, strict=True)) if a != b]
    assert len(moved) == meta["pretrained"]["oov_rows_borrowed"]
    assert any(set(symbols[i]) & LIVONIAN for i in moved)
    assert all(not before[i].startswith(("__", "madeupword")) for i in moved)
    assert min(moved) > len(symbols) // 2  # the rare end of the frequency-sorted dictionary
    # the trained model's tokens: Livonian pieces decode to the text (SentencePiece's own
    # decoding would make an unknown piece " ⁇ ")
    model = step_dir(work, "cont") / "model"
    tokens = LanguageTokens.load(model, json.loads((model / "artifact.json").read_text()))
    _, liv = livonian(340, 352)
    encoded = tokens.pieces(liv)
    assert [tokens.decode([tokens.prefix[0], *p]) for p in encoded] == [
        " ".join(t.split()) for t in liv
    ]
    assert len(output(work, "tr")) == 12


def test_the_documented_continuation_loads(write_recipe, tmp_path: Path) -> None:
    """docs/decoding.md's example of continuing M2M-100 is a valid recipe: the models entry,
    binarize with it as spm (Livonian tagged __et__, oov: rare), train with it as init."""
    import yaml

    page = (ROOT / "docs" / "decoding.md").read_text(encoding="utf-8")
    section = page.split("### Continuing M2M-100 or NLLB", 1)[1]
    block = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    en, liv = livonian(0, 20) if LIVEN.is_dir() else (["a"] * 20, ["b"] * 20)
    pairs = {"en": write_pairs(tmp_path, "liv", en, liv)["en"]}
    pairs["liv"] = write_pairs(tmp_path, "liv", en, liv)["ja"]
    local = {"source": "local", "files": pairs}
    doc = {
        "name": "liv",
        "directions": ["en-liv"],
        "data": {"liv": local, "wmt22_enliv": local},
        "models": block["models"],
        "steps": {
            "liv_split": {
                "kind": "split",
                "inputs": {"corpus": "liv"},
                "valid_size": 5,
                "test_size": 0,
            },
            **block["steps"],
        },  # fmt: skip
    }
    recipe = load_recipe(write_recipe(doc), load_registry())
    kinds = {name: spec.kind for name, spec in recipe.steps.items()}
    assert kinds["m2m100_418m"] == "fetch_model" and kinds["train_enliv"] == "train"
    assert recipe.steps["bin_enliv"].plugin.config.oov == "rare"
    assert recipe.steps["bin_enliv"].plugin.config.tgt_token == "__et__"


@pytest.mark.skipif(not LIVEN.is_dir(), reason=f"real data not found at {LIVEN}")
def test_multilingual_pairs_keep_their_own_tokens_and_a_bt_tag_stays_one_piece(
    models: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    write_recipe,
) -> None:
    """HW-TSC §5.3's multilingual Liv<->En: real Liv->En pairs (Livonian tagged __et__) are
    joined in one training set by pairs of other languages (real En-Ja lines read as Ja->En
    here), each with its own tokens, so the model still knows which language it reads and
    writes. A tagged back-translation's <BT> (Caswell et al. 2019) is one dictionary entry (a
    rare row, as Livonian's unknown pieces), not SentencePiece's pieces of "<BT>". An input
    aux does not name, and aux with a recipe's own SentencePiece model, are refused."""
    from fairseq.data import Dictionary, data_utils

    en, liv = livonian(0, 120)
    liv = [f"<BT> {line}" if i < 40 else line for i, line in enumerate(liv)]
    files = {"train": (liv, en), "valid": livonian(120, 140)[::-1]}
    doc = recipe(tmp_path, models["m2m100"])
    for name, (src, tgt) in files.items():
        pair = write_pairs(tmp_path, name, src, tgt)
        doc["data"][name]["files"] = {"liv": pair["en"], "en": pair["ja"]}
    aux = write_pairs(tmp_path, "aux", lines("train", "en", 60), lines("train", "ja", 60))
    doc["data"]["aux_ja"] = {"source": "local", "files": aux}
    doc["directions"] = ["liv-en"]
    bin_step = doc["steps"]["bin"]
    bin_step["inputs"]["aux_ja"] = "aux_ja"
    bin_step.update(src="liv", tgt="en", src_token="__et__", oov="rare", tags=["<BT>"])
    bin_step["aux"] = {"aux_ja": {"src": "ja", "tgt": "en"}}
    doc["steps"] = {"bin": bin_step}
    done = run(tmp_path, write_recipe, "w", doc)
    assert done.exit_code == 0, done.output
    data = step_dir(tmp_path / "w", "bin") / "data"
    meta = json.loads((data / "artifact.json").read_text())
    assert meta["lines"]["train"] == 180 and meta["language_tokens"]["src"] == "__et__"
    dictionary = Dictionary.load(str(data / "dict.liv.txt"))
    source = data_utils.load_indexed_dataset(str(data / "train.liv-en.liv"), dictionary)
    target = data_utils.load_indexed_dataset(str(data / "train.liv-en.en"), dictionary)
    first = [[dictionary[int(i)] for i in source[n][:2]] for n in range(len(source))]
    heads = [(dictionary[int(source[n][0])], dictionary[int(target[n][0])]) for n in range(180)]
    assert first[:40] == [["__et__", "<BT>"]] * 40  # one entry, after the language token
    assert all(f[1] != "<BT>" for f in first[40:])
    assert heads[:120] == [("__et__", "__en__")] * 120
    assert heads[120:] == [("__ja__", "__en__")] * 60  # the aux pairs' own source token
    tok = load_tokenizer(models["m2m100"])
    assert "<BT>" not in tok.get_vocab() and dictionary.index("<BT>") != dictionary.unk()
    ja = lines("train", "ja", 1)[0]
    pieces = tok.sp_model.encode(ja, out_type=str)
    assert [dictionary[int(i)] for i in source[120][1:-1]] == [
        p if dictionary.index(p) != dictionary.unk() else "<unk>" for p in pieces
    ][: len(source[120]) - 2]
    # an input aux does not name; aux with a recipe's own SentencePiece model
    wrong = json.loads(json.dumps(doc))
    wrong["steps"]["bin"]["aux"] = {}
    done = run(tmp_path, write_recipe, "u", wrong)  # at validation, before any step runs
    assert done.exit_code != 0
    assert "steps.bin.inputs.aux_ja: step kind 'binarize' has no input" in done.output
    assert "'aux_ja' with these settings (valid: cycled, dictionary, spm, train" in done.output
    assert not (tmp_path / "u" / "steps").exists()
    wrong = json.loads(json.dumps(doc))
    wrong["steps"]["bin"]["aux"] = {"train": {"src": "ja", "tgt": "en"}}
    done = run(tmp_path, write_recipe, "r", wrong)
    assert done.exit_code != 0 and "train is an input of binarize itself" in done.output
    wrong = json.loads(json.dumps(doc))
    wrong["steps"]["bin"]["oov"] = "unk"
    done = run(tmp_path, write_recipe, "k", wrong)
    assert done.exit_code != 0 and "tags need oov: rare" in done.output
    config = {"src": "liv", "tgt": "en", "aux": {"aux_ja": {"src": "ja", "tgt": "en"}}}
    with pytest.raises(DataError, match="aux needs a pretrained model as spm"):
        BinarizeStep.from_dict(config).run(
            make_ctx(tmp_path / "b", "binarize", train=data, valid=data, spm=data, aux_ja=data)
        )


def test_an_ensemble_of_continued_models_decodes_with_fairseq_as_one_does_with_ctranslate2(
    models: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    write_recipe,
) -> None:
    """HW-TSC §5.3's submission ensembles four continued M2M-100 models; CTranslate2 decodes one
    model, so an ensemble of continued models decodes with fairseq: the tokenizer's pieces
    after the source token, the target token forced first. Two copies of one model average to
    that model, so the fairseq ensemble writes what CTranslate2 writes for the model alone, on
    real test lines (one empty). Members trained with other language tokens are refused."""
    doc = recipe(tmp_path, models["m2m100"], lr=1e-12)
    doc["steps"]["ens"] = {
        **doc["steps"]["tr"],
        "inputs": {"model": "cont", "model2": "cont", "corpus": "test"},
    }
    done = run(tmp_path, write_recipe, "w", doc)
    assert done.exit_code == 0, done.output
    work = tmp_path / "w"
    single, ensemble = output(work, "tr"), output(work, "ens")
    assert ensemble == single and ensemble[5] == "" and sum(1 for h in single if h) == 11
    backends = {
        step: json.loads((step_dir(work, step) / "manifest.json").read_text())["metrics"]["backend"]
        for step in ("tr", "ens")
    }
    assert backends == {"tr": "ctranslate2", "ens": "fairseq"}
    doc["steps"]["ens"]["backend"] = "ctranslate2"
    done = run(tmp_path, write_recipe, "w", doc)
    assert done.exit_code != 0 and "backend ctranslate2 cannot decode: an ensemble" in done.output
    other = recipe(tmp_path, models["m2m100"], lr=1e-12)
    other["steps"]["bin2"] = {**other["steps"]["bin"], "tgt_token": "__ko__"}
    other["steps"]["cont2"] = {**other["steps"]["cont"], "inputs": {"data": "bin2", "init": "m2m"}}
    other["steps"]["ens"] = {
        **other["steps"]["tr"],
        "inputs": {"model": "cont", "model2": "cont2", "corpus": "test"},
    }
    done = run(tmp_path, write_recipe, "o", other)
    assert done.exit_code != 0 and "an ensemble reads one tokenization" in done.output

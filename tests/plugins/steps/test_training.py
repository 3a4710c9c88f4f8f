"""The training toolbox of the train and translate steps, on real en-ja slices and micro models:
fine-tuning, vocabulary-mapped initialisation, early stopping, best/last-N averaging, R2L,
Adafactor, criterion settings, torchrun processes and ensembles."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import DataError, StepError
from mtcore.contracts.step import Artifact
from mtcore_plugins.common.fairseq.checkpoints import (
    average_checkpoints,
    best_entries,
    keep_best,
    save_for_inference,
    select_best,
    select_checkpoints,
)
from mtcore_plugins.common.fairseq.setup import add_safe_globals
from mtcore_plugins.steps._fairseq_entry import reverse_tokens
from mtcore_plugins.steps._train_config import TrainConfig
from mtcore_plugins.steps._vocab_map import map_vocabulary
from mtcore_plugins.steps.binarize import BinarizeStep
from mtcore_plugins.steps.spm import SentencePieceStep
from mtcore_plugins.steps.train import TrainStep, parse_train_log
from mtcore_plugins.steps.translate import TranslateConfig, TranslateStep, Translator
from tests.plugins.steps.test_fairseq_steps import DATA, write_corpus
from tests.support.steps import make_ctx

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="small_parallel_enja not available")

MICRO = {
    "arch": "mtcore_transformer_micro",
    "max_tokens": 1024,
    "dropout": 0.1,
    "log_interval": 1,
    "threads": 1,
}
PARENT = {**MICRO, "max_update": 10, "lr": 0.003, "warmup_updates": 5}
PARENT |= {"save_interval_updates": 5, "keep_last": 2, "average_last": 2}
# NT5 Table 2 "Fine-tuning Configuration": fixed LR 1e-5, no warmup.
FINETUNE = {**MICRO, "lr": 1e-5, "lr_scheduler": "fixed", "warmup_updates": 0}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corpora")
    return {
        "train": write_corpus(root / "train", "train", 1000, []),
        "valid": write_corpus(root / "valid", "dev", 60, []),
        "test": write_corpus(root / "test", "test", 12, []),
    }


@pytest.fixture(scope="module")
def vocabs(corpora: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two SentencePiece vocabularies of the same corpus (1,000 and 1,200 pieces), each with
    its binarized data: ``spm_a``, ``data_a``, ``spm_b``, ``data_b``."""
    out = {}
    for name, size in (("a", 1000), ("b", 1200)):
        work = tmp_path_factory.mktemp(f"vocab_{name}")
        ctx = make_ctx(work, "spm", corpus=corpora["train"])
        SentencePieceStep.from_dict({"vocab_size": size, "num_threads": 1}).run(ctx)
        inputs = {"train": corpora["train"], "valid": corpora["valid"], "spm": work / "model"}
        BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(make_ctx(work, "bin", **inputs))
        out[f"spm_{name}"], out[f"data_{name}"] = work / "model", work / "data"
    return out


def train(work: Path, config: dict[str, Any], data: Path, **inputs: Path) -> Any:
    ctx = make_ctx(work, "train", data=data, **inputs)
    TrainStep.from_dict(config).run(ctx)
    return ctx


@pytest.fixture(scope="module")
def parent(vocabs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("parent")
    train(work, PARENT, vocabs["data_a"])
    return work / "model"


def load(path: Path) -> dict[str, Any]:
    import torch

    add_safe_globals()
    return dict(torch.load(path, map_location="cpu", weights_only=True))


def records(log: Path, kind: str) -> list[dict[str, Any]]:
    found = re.findall(rf"\| {kind} \| (\{{.*\}})", log.read_text(encoding="utf-8"))
    return [json.loads(r) for r in found]


# --- averaging and the best N ------------------------------------------------------------


def test_average_until_best_ends_at_the_early_stopping_point(tmp_path: Path) -> None:
    """NT5 §4.3 with Table 2: early stopping, then the last ten averaged. Counted back from the
    best checkpoint, the average holds the checkpoints up to it, not the patience window after
    it; fairseq keeps that window too, and the setting needs early stopping."""
    for updates in range(10, 101, 10):
        (tmp_path / f"checkpoint_1_{updates}.pt").write_bytes(b"")
    names = [p.name for p in select_checkpoints(tmp_path, 3, until=60)]
    assert names == ["checkpoint_1_40.pt", "checkpoint_1_50.pt", "checkpoint_1_60.pt"]
    assert [p.name for p in select_checkpoints(tmp_path, 2)][-1] == "checkpoint_1_100.pt"
    settings = {"average_last": 10, "keep_last": 10, "patience": 10, "best_metric": "bleu"}
    step = TrainStep.from_dict({**settings, "average_until": "best"})
    meta = {"src": "en", "tgt": "ja"}
    cmd = step.command(tmp_path, meta, tmp_path / "save")
    assert cmd[cmd.index("--keep-interval-updates") + 1] == "20"
    plain = TrainStep.from_dict(settings).command(tmp_path, meta, tmp_path / "save")
    assert plain[plain.index("--keep-interval-updates") + 1] == "10"
    with pytest.raises(ValueError, match="average_until: best needs patience"):
        TrainConfig.model_validate({"average_until": "best"})


def test_dev_bleu_tokenized_as_the_paper_scores(tmp_path: Path, monkeypatch) -> None:
    """fairseq's dev BLEU of decoded text uses 13a, which leaves a Japanese sentence one word:
    ``bleu_tokenize: ja-mecab`` reaches the training process, whose sacrebleu then tokenizes
    with MeCab (a partly right Japanese hypothesis scores above 0)."""
    import sacrebleu

    from mtcore_plugins.steps import _fairseq_entry as fairseq_entry

    step = TrainStep.from_dict({"best_metric": "bleu", "bleu_tokenize": "ja-mecab"})
    cmd = step.command(tmp_path, {"src": "en", "tgt": "ja"}, tmp_path / "save")
    assert cmd[cmd.index("--bleu-tokenize") + 1] == "ja-mecab"
    assert "--eval-bleu-remove-bpe" in cmd
    hyp, ref = ["私は猫がとても好きです。"], [["私は犬がとても好きです。"]]
    assert sacrebleu.corpus_bleu(hyp, ref).score == 0.0  # one 13a word each
    monkeypatch.setattr(sacrebleu, "corpus_bleu", sacrebleu.corpus_bleu)  # restored after
    fairseq_entry._dev_bleu_tokenized("ja-mecab")
    assert sacrebleu.corpus_bleu(hyp, ref).score > 30
    assert sacrebleu.corpus_bleu(hyp, ref, tokenize="none").score == 0.0  # pieces stay pieces


def test_average_is_the_mean_of_the_inputs(tmp_path: Path) -> None:
    import torch

    generator = torch.Generator().manual_seed(0)
    states: list[dict[str, Any]] = []
    for i in range(3):
        state: dict[str, Any] = {
            "model": {
                "w": torch.randn(4, 3, generator=generator),
                "half": torch.randn(5, generator=generator).half(),  # fp16-trained weights
                "steps": torch.tensor([10 * (i + 1)]),  # integer buffer: floor of the mean
            },
            "optimizer_history": [{"num_updates": 5 * (i + 1)}],
            "last_optimizer_state": {"exp_avg": torch.ones(1)},
            "extra_state": {"train_iterator": {"epoch": 1}, "previous_training_time": 3.0},
        }
        torch.save(state, tmp_path / f"c{i}.pt")
        states.append(state)
    average_checkpoints([tmp_path / f"c{i}.pt" for i in range(3)], tmp_path / "avg.pt")
    averaged = load(tmp_path / "avg.pt")
    weights = torch.stack([s["model"]["w"].double() for s in states]).mean(0)
    assert torch.allclose(averaged["model"]["w"].double(), weights, rtol=0, atol=1e-7)
    halves = torch.stack([s["model"]["half"].double() for s in states]).mean(0)
    assert averaged["model"]["half"].dtype == torch.float16
    assert torch.equal(averaged["model"]["half"], halves.half())
    assert averaged["model"]["steps"].tolist() == [20]
    # the rest comes from the last input, without optimizer state or timings
    assert "last_optimizer_state" not in averaged
    assert averaged["optimizer_history"] == [{"num_updates": 15}]
    assert averaged["extra_state"] == {"train_iterator": {"epoch": 1}}


def test_the_inference_checkpoint_names_no_path_of_its_workdir(tmp_path: Path) -> None:
    """A model trained from another one kept that model's absolute path (fairseq's
    finetune_from_model), so the same model had other bytes in another workdir (the kill
    sweep's first finding); an unset path stays unset."""
    import argparse

    import torch

    def state(init: str | None) -> dict[str, Any]:
        flat = argparse.Namespace(save_dir="/w/a/ckpt", data="/w/a/bin", finetune_from_model=init)
        cfg = {
            "checkpoint": {"save_dir": "/w/a/ckpt", "finetune_from_model": init},
            "task": {"data": "/w/a/bin"},
            "model": flat,
        }
        return {"cfg": cfg, "model": {"w": torch.ones(2)}, "extra_state": {}}

    for init, written in (("/w/a/steps/base/model/checkpoint.pt", "init.pt"), (None, None)):
        save_for_inference(state(init), {"w": torch.ones(2)}, tmp_path / "model.pt")
        cfg = load(tmp_path / "model.pt")["cfg"]
        assert cfg["checkpoint"] == {"save_dir": "checkpoints", "finetune_from_model": written}
        assert cfg["task"] == {"data": "."}
        assert vars(cfg["model"]) == {
            "save_dir": "checkpoints",
            "data": ".",
            "finetune_from_model": written,
        }


def test_keep_best_keeps_the_best_n(tmp_path: Path) -> None:
    import torch

    source = tmp_path / "checkpoint_last.pt"
    # (updates, BLEU, kept?): fairseq's own --keep-best-checkpoints would drop the 8.0 while
    # only one is kept; ties prefer the later checkpoint; a NaN ranks nowhere.
    history = [(10, 10.0, True), (20, 8.0, True), (30, 9.0, True), (40, 7.0, False)]
    history += [(50, 9.0, True), (60, float("nan"), False)]
    for updates, bleu, kept in history:
        state = {"model": {"n": torch.tensor([updates])}, "last_optimizer_state": {"m": 1}}
        torch.save(state, source)
        assert keep_best(tmp_path, source, updates, bleu, 3, maximize=True) is kept
    assert [(e["updates"], e["metric"]) for e in best_entries(tmp_path)] == [
        (10, 10.0),
        (50, 9.0),
        (30, 9.0),
    ]
    chosen = [load(p) for p in select_best(tmp_path, 2)]  # in update order
    assert [c["model"]["n"].item() for c in chosen] == [10, 50]
    assert not any("last_optimizer_state" in c for c in chosen)  # kept for averaging only
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == [
        "best.json",
        "checkpoint_u10.pt",
        "checkpoint_u30.pt",
        "checkpoint_u50.pt",
    ]
    # loss: lower is better
    keep_best(tmp_path / "loss", source, 5, 4.0, 1, maximize=False)
    keep_best(tmp_path / "loss", source, 6, 3.5, 1, maximize=False)
    assert [e["updates"] for e in best_entries(tmp_path / "loss")] == [6]


# --- settings and the command line --------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # reversed dev outputs decoded to text would be scrambled before BLEU
        (
            {"direction": "r2l", "best_metric": "bleu", "bleu_tokenize": "detok"},
            "bleu_tokenize: pieces",
        ),
        # the step's own setting must not be passed twice
        ({"criterion_args": {"label_smoothing": 0.2}}, "set label_smoothing there"),
        # criterion settings become --flags: only plain names
        ({"criterion_args": {"--alpha": 5}}, "not a setting name"),
        # a typo in a paper setting is an error, not a silent default
        ({"patiance": 16}, "Extra inputs are not permitted"),
        ({"optimizer": "sgd"}, "'adam' or 'adafactor'"),
        # the batch stated in tokens owns the accumulation and the width
        ({"batch_tokens": 8192, "update_freq": 2}, "leave update_freq"),
        ({"batch_tokens": 8192, "distributed_world_size": 2}, "distributed_world_size at 1"),
        ({"batch_tokens": 5000, "max_tokens": 1024}, "not a whole number of batches"),
    ],
)
def test_train_config_rejects(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig.model_validate(settings)


def test_translate_weights_name_model_inputs() -> None:
    with pytest.raises(ValueError, match="not a model input"):
        TranslateConfig.model_validate({"src": "en", "tgt": "ja", "weights": {"modle2": 1.0}})
    with pytest.raises(ValueError, match="must be > 0"):
        TranslateConfig.model_validate({"src": "en", "tgt": "ja", "weights": {"model2": 0.0}})


def flag_value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


@pytest.mark.parametrize(("ranks", "update_freq"), [(1, 80), (2, 40), (5, 16), (16, 5), (80, 1)])
def test_update_freq_follows_the_width(ranks: int, update_freq: int, tmp_path: Path) -> None:
    """NT5 Table 2's 1,280,000-token batch: 80 batches of 16,000 tokens at any width."""
    step = TrainStep.from_dict({"max_tokens": 16000, "batch_tokens": 1_280_000})
    assert isinstance(step, TrainStep)
    cmd = step.command(tmp_path, {"src": "en", "tgt": "ja"}, tmp_path / "ck", ranks=ranks)
    assert flag_value(cmd, "--update-freq") == str(update_freq)
    assert flag_value(cmd, "--nproc") == str(ranks)
    assert step.work() == {"tokens": 50_000 * 1_280_000.0, "batches": 80.0}


def test_a_width_that_cannot_share_the_batch_is_refused(tmp_path: Path) -> None:
    step = TrainStep.from_dict({"max_tokens": 16000, "batch_tokens": 1_280_000})
    assert isinstance(step, TrainStep)
    with pytest.raises(StepError, match=r"80 batches .* 3 ranks cannot share evenly"):
        step.command(tmp_path, {"src": "en", "tgt": "ja"}, tmp_path / "ck", ranks=3)


def test_threads_and_width_are_not_the_steps_identity() -> None:
    """Where a training runs (its threads, its ranks) does not change what it computes; its
    batch does."""
    from mtcore.api.engine import identity_dict

    base = {"max_tokens": 1024, "batch_tokens": 4096}
    one = identity_dict(TrainConfig.model_validate({**base, "threads": 1}))
    assert one == identity_dict(TrainConfig.model_validate({**base, "threads": 8}))
    assert "threads" not in one and one["batch_tokens"] == 4096
    other = identity_dict(TrainConfig.model_validate({**base, "batch_tokens": 8192}))
    assert other != one
    # a recipe that does not state batch_tokens keeps the hash it had
    assert "batch_tokens" not in identity_dict(TrainConfig.model_validate({}))


@pytest.mark.parametrize(
    ("settings", "present", "absent"),
    [
        # the default: Adam with NT5 Table 2's betas, label smoothing through the entry
        ({}, {"--optimizer": "adam", "--adam-betas": "(0.9, 0.98)"}, ["--decay-rate", "--r2l"]),
        # Xiaomi §4.1 Adafactor: no Adam flags (fairseq would reject them)
        (
            {"optimizer": "adafactor", "adafactor_beta1": 0.9},
            {"--optimizer": "adafactor", "--decay-rate": "-0.8", "--beta1": "0.9"},
            ["--adam-betas", "--adam-eps"],
        ),
        # R-Drop-style criterion settings: --key value, true -> bare flag, false -> left out
        (
            {"criterion": "cross_entropy", "criterion_args": {"alpha": 5, "x_y": True, "z": False}},
            {"--criterion": "cross_entropy", "--alpha": "5"},
            ["--z"],
        ),
        # early stopping on dev BLEU over pieces (Xiaomi §4.1: 16 checkpoints, beam 4)
        (
            {"best_metric": "bleu", "patience": 16},
            {"--best-checkpoint-metric": "bleu", "--patience": "16"},
            ["--eval-bleu-remove-bpe"],
        ),
        # detok BLEU removes SentencePiece before sacrebleu's 13a tokenizer
        (
            {"best_metric": "bleu", "bleu_tokenize": "detok"},
            {"--eval-bleu-remove-bpe": "sentencepiece"},
            ["--eval-tokenized-bleu"],
        ),
        # best-N averaging needs the entry to keep the best checkpoints
        ({"average_best": 10}, {"--keep-best": "10"}, ["--patience"]),
        # several processes through torchrun, R2L targets reversed in the entry
        ({"distributed_world_size": 2, "direction": "r2l"}, {"--nproc": "2"}, []),
        # fp16 on GPU (the device check happens at run time)
        ({"precision": "fp16"}, {}, ["--bf16"]),
    ],
)
def test_train_command(
    settings: dict[str, Any], present: dict[str, str], absent: list[str], tmp_path: Path
) -> None:
    step = TrainStep.from_dict(settings)
    assert isinstance(step, TrainStep)
    cmd = step.command(tmp_path, {"src": "en", "tgt": "ja"}, tmp_path / "ck")
    for flag, value in present.items():
        assert flag_value(cmd, flag) == value
    for flag in absent:
        assert flag not in cmd
    if settings.get("criterion_args", {}).get("x_y"):
        assert "--x-y" in cmd and "True" not in cmd and "False" not in cmd
    if settings.get("direction") == "r2l":
        assert cmd.index("--r2l") < cmd.index("--")  # an entry option, not a fairseq one
    if settings.get("precision"):
        assert "--fp16" in cmd
    if settings.get("best_metric") == "bleu":
        generation = json.loads(flag_value(cmd, "--eval-bleu-args"))
        assert generation["beam"] == 4 and "--maximize-best-checkpoint-metric" in cmd
    assert "--finetune-from-model" not in cmd
    init_cmd = step.command(tmp_path, {"src": "en", "tgt": "ja"}, tmp_path / "ck", tmp_path / "i")
    assert flag_value(init_cmd, "--finetune-from-model") == str(tmp_path / "i")


def test_fp16_on_a_machine_without_gpu_is_an_error(vocabs: dict[str, Path], tmp_path: Path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(StepError, match="precision fp16 needs a CUDA GPU"):
        train(tmp_path, {**PARENT, "precision": "fp16"}, vocabs["data_a"])


def test_parse_train_log_early_stop_and_init(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "x | INFO | fairseq.trainer | Loaded checkpoint /m/checkpoint.pt (epoch 3 @ 0 updates)\n"
        'x | INFO | valid | {"epoch": 1, "valid_loss": "7.1", "valid_bleu": "1.5", '
        '"valid_num_updates": "8"}\n'
        "x | INFO | fairseq_cli.train | early stop since valid performance hasn't improved "
        "for last 2 runs\n"
    )
    found = parse_train_log(log)
    assert found["init_loaded"] and found["early_stopped"] and found["valid_bleu"] == 1.5
    assert "resumed_from_update" not in found  # loading the init model is not a resume


# --- R2L: reversed targets, restored output ------------------------------------------------


def test_reverse_tokens_keeps_eos_last(vocabs: dict[str, Path]) -> None:
    from fairseq.data import Dictionary, data_utils

    data = vocabs["data_a"]
    dictionary = Dictionary.load(str(data / "dict.ja.txt"))
    dataset = data_utils.load_indexed_dataset(str(data / "valid.en-ja.ja"), dictionary)
    for index in range(len(dataset)):
        tokens = dataset[index]
        reversed_tokens = reverse_tokens(tokens, dictionary.eos())
        assert reversed_tokens[-1] == dictionary.eos() and len(reversed_tokens) == len(tokens)
        assert reversed_tokens[:-1].tolist() == tokens[:-1].tolist()[::-1]
    without_eos = dataset[0][:-1]
    assert reverse_tokens(without_eos, dictionary.eos()).tolist() == without_eos.tolist()[::-1]


# --- initialising from a pretrained model --------------------------------------------------


def dictionary(entries: list[tuple[str, int]]) -> Any:
    from fairseq.data import Dictionary

    d = Dictionary()
    for symbol, count in entries:
        d.add_symbol(symbol, n=count)
    return d


OLD = [("the", 90), ("cat", 50), ("sat", 20), ("xyz", 3), ("qqq", 1), ("madeupword0000", 0)]


@pytest.mark.parametrize(
    ("new", "rows"),
    [
        # shared tokens keep their rows; specials (0-3) map to themselves
        ([("cat", 9), ("the", 5)], [0, 1, 2, 3, 5, 4]),
        # new tokens borrow the rarest unused entries, most frequent new token first: qqq, xyz
        ([("the", 9), ("dog", 8), ("ran", 7)], [0, 1, 2, 3, 4, 8, 7]),
        # more new tokens than unused entries (the five words): donors are used again
        (
            [("a", 9), ("b", 8), ("c", 7), ("d", 6), ("e", 5), ("f", 4)],
            [0, 1, 2, 3, 8, 7, 6, 5, 4, 8],
        ),
        # a padding entry only the new dictionary has takes <unk>: it never occurs
        ([("the", 9), ("madeupword0001", 0)], [0, 1, 2, 3, 4, 3]),
    ],
)
def test_map_vocabulary_rule(new: list[tuple[str, int]], rows: list[int]) -> None:
    assert map_vocabulary(dictionary(OLD), dictionary(new)).rows == rows


def test_map_vocabulary_when_every_entry_is_shared() -> None:
    # no unused entry: the rarest shared ones donate (qqq first)
    old = dictionary(OLD[:5])
    mapped = map_vocabulary(old, dictionary([*OLD[:5], ("new", 1)]))
    assert mapped.rows[-1] == old.index("qqq") and mapped.shared == 9 and mapped.borrowed == 1


def test_init_with_another_dictionary_needs_map(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(DataError, match=r"line \d+ is .*set init_vocab: map"):
        train(tmp_path, {**FINETUNE, "max_update": 2}, vocabs["data_b"], init=parent)
    with pytest.raises(DataError, match="set arch: mtcore_transformer_micro"):
        train(
            tmp_path, {**FINETUNE, "arch": "mtcore_transformer_tiny"}, vocabs["data_a"], init=parent
        )


def test_vocabulary_mapped_init_copies_shared_rows(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """HW-TSC §3.3: a model with another vocabulary starts from the pretrained rows."""
    import torch
    from fairseq.data import Dictionary

    from mtcore_plugins.steps._vocab_map import remap_checkpoint

    old = Dictionary.load(str(parent / "dict.ja.txt"))
    new = Dictionary.load(str(vocabs["data_b"] / "dict.ja.txt"))
    dicts_old = (parent / "dict.en.txt", parent / "dict.ja.txt")
    dicts_new = (vocabs["data_b"] / "dict.en.txt", vocabs["data_b"] / "dict.ja.txt")
    maps = remap_checkpoint(parent / "checkpoint.pt", dicts_old, dicts_new, tmp_path / "m.pt")
    before, after = load(parent / "checkpoint.pt")["model"], load(tmp_path / "m.pt")["model"]
    keys = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    keys.append("decoder.output_projection.weight")
    shared = [s for s in new.symbols if s in old.indices]
    assert maps["target"].shared == len(shared) > 500 and maps["target"].borrowed > 50
    for key in keys:
        assert after[key].shape == (len(new), before[key].shape[1])
        for symbol in shared:
            assert torch.equal(after[key][new.index(symbol)], before[key][old.index(symbol)])
    # the most frequent new-only token got the rarest row the new vocabulary does not use
    unused = [i for i in range(old.nspecial, len(old)) if old.symbols[i] not in set(new.symbols)]
    rarest = min(unused, key=lambda i: (old.count[i], -i))
    first_new = next(i for i, s in enumerate(new.symbols) if s not in old.indices)
    assert torch.equal(after[keys[2]][first_new], before[keys[2]][rarest])
    for key in set(before) - set(keys):  # everything else is the pretrained model's
        assert torch.equal(after[key], before[key])


# --- slow: whole trainings -----------------------------------------------------------------


@pytest.mark.slow
def test_finetune_resets_and_starts_from_the_parent(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    # NT5 §4.3 caps fine-tuning at 600 updates; 6 here. update_freq 2 doubles the batch.
    config = {**FINETUNE, "max_update": 6, "update_freq": 2, "save_interval_updates": 3}
    config["criterion_args"] = {"report_accuracy": True}
    ctx = train(tmp_path, config, vocabs["data_a"], init=parent)
    log = tmp_path / "model/train.log"
    text = log.read_text(encoding="utf-8")
    assert "optimizer, lr scheduler, meters, dataloader will be reset" in text
    assert ctx.metrics["updates"] == 6 and ctx.metrics["init_loaded"]
    inner = records(log, "train_inner")
    assert [int(r["num_updates"]) for r in inner] == [1, 2, 3, 4, 5, 6]  # counted from 0
    assert {float(r["lr"]) for r in inner} == {1e-5}  # fixed, no warmup
    parent_batch = sum(float(r["wpb"]) for r in records(parent / "train.log", "train_inner"))
    parent_batch /= len(records(parent / "train.log", "train_inner"))
    batch = sum(float(r["wpb"]) for r in inner) / len(inner)
    assert 1.6 < batch / parent_batch < 2.4
    assert "valid_accuracy" in records(log, "valid")[-1]  # the criterion setting arrived
    # Adam moves each weight by about lr per update: a start from random weights would differ
    # by far more than 6 updates x 1e-5.
    before, after = load(parent / "checkpoint.pt")["model"], load(tmp_path / "model/checkpoint.pt")
    moved = max(float((after["model"][k] - before[k]).abs().max()) for k in before)
    assert 0 < moved < 10 * 6 * 1e-5
    meta = Artifact.open(tmp_path / "model").meta
    assert meta["models"] == ["transformer_presets"] and meta["direction"] == "l2r"


@pytest.mark.slow
def test_vocabulary_mapped_init_trains(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    config = {**FINETUNE, "max_update": 3, "save_interval_updates": 3, "init_vocab": "map"}
    ctx = train(tmp_path, config, vocabs["data_b"], init=parent)
    assert ctx.stats["train.init_target_shared"] > 500 and ctx.metrics["updates"] == 3
    mapped = tmp_path / ".scratch/init/mapped.pt"
    assert f"loading pretrained model from {mapped}" in (tmp_path / "model/train.log").read_text()
    # the pretrained rows make the first loss far lower than a fresh model's (about 10.4)
    assert float(records(tmp_path / "model/train.log", "train_inner")[0]["loss"]) < 9.0


@pytest.mark.slow
def test_early_stopping_on_bleu_and_best_average(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """With a learning rate of 1e-9 the dev BLEU never improves: training stops after the first
    validation plus ``patience`` more, and the best two are averaged."""
    config = {**FINETUNE, "lr": 1e-9, "optimizer": "adafactor", "max_update": 500}
    config |= {"save_interval_updates": 3, "best_metric": "bleu", "patience": 2, "average_best": 2}
    ctx = train(tmp_path, config, vocabs["data_a"], init=parent)
    log = tmp_path / "model/train.log"
    valid = records(log, "valid")
    assert len(valid) == 3 and len({r["valid_bleu"] for r in valid}) == 1
    assert ctx.metrics["early_stopped"] and ctx.metrics["updates"] == 9
    assert "optimizer='adafactor'" in log.read_text()  # a legacy optimizer: argparse config
    # equal scores: the later checkpoints rank first
    assert ctx.metrics["averaged"] == [
        {"updates": 9, "bleu": float(valid[0]["valid_bleu"])},
        {"updates": 6, "bleu": float(valid[0]["valid_bleu"])},
    ]


@pytest.mark.slow
def test_dev_bleu_of_empty_outputs_is_zero(vocabs: dict[str, Path], tmp_path: Path) -> None:
    """A young model emits EOS first; fairseq 0.12 alone then fails with KeyError 'bleu'."""
    config = {**PARENT, "max_update": 6, "warmup_updates": 2, "save_interval_updates": 3}
    config |= {"best_metric": "bleu", "bleu_tokenize": "detok", "average_best": 1}
    ctx = train(tmp_path, config, vocabs["data_a"])
    valid = records(tmp_path / "model/train.log", "valid")
    assert [float(r["valid_bleu"]) for r in valid] == [0.0, 0.0]
    assert ctx.metrics["averaged"] == [{"updates": 6, "bleu": 0.0}]


@pytest.mark.slow
def test_r2l_trains_reversed_and_translates_in_reading_order(
    parent: Path, vocabs: dict[str, Path], corpora: dict[str, Path], tmp_path: Path
) -> None:
    import torch

    ctx = train(tmp_path / "train", {**PARENT, "direction": "r2l"}, vocabs["data_a"])
    model = tmp_path / "train/model"
    assert "targets of train read right to left (r2l)" in (model / "train.log").read_text()
    assert Artifact.open(model).meta["direction"] == "r2l" and ctx.metrics["updates"] == 10
    step = TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 2, "threads": 1})
    inputs = {"model": model, "corpus": corpora["test"], "spm": vocabs["spm_a"]}
    translate_ctx = make_ctx(tmp_path / "tr", "translate", **inputs)
    step.run(translate_ctx)
    assert translate_ctx.stats["translate.lines"] == 12
    # a right-to-left output (last piece first, then EOS) comes out in reading order
    translator = Translator(step.config, translate_ctx)  # type: ignore[arg-type]
    sentence = (DATA / "test.ja").read_text(encoding="utf-8").splitlines()[0]
    pieces = translator.spm.encode(sentence, out_type=str)
    ids = [translator.tgt_dict.index(p) for p in reversed(pieces)] + [translator.tgt_dict.eos()]
    assert translator._decode(torch.tensor(ids)) == translator.spm.decode(pieces)
    both = make_ctx(tmp_path / "mixed", "translate", **{**inputs, "model": parent}, model2=model)
    with pytest.raises(DataError, match="input model2 .* is r2l, input model is l2r"):
        TranslateStep.from_dict({"src": "en", "tgt": "ja"}).run(both)


def first_step_log_probs(translator: Translator, lines: list[str]) -> Any:
    """The ensemble's (or single model's) log-probabilities of the first target token."""
    import torch
    from fairseq.data import data_utils

    sources = [translator._encode(p) for p in translator.spm.encode(lines, out_type=str)]
    src = data_utils.collate_tokens(sources, translator.src_dict.pad(), left_pad=True)
    net_input = {"src_tokens": src, "src_lengths": torch.tensor([len(s) for s in sources])}
    ensemble = translator.generator.model
    with torch.inference_mode():
        encoder_outs = ensemble.forward_encoder(net_input)
        start = torch.full((len(lines), 1), translator.tgt_dict.eos())
        states: list[dict[str, Any]] = [{} for _ in range(ensemble.models_size)]
        log_probs, _ = ensemble.forward_decoder(start, encoder_outs, states)
    return log_probs


@pytest.mark.slow
def test_ensemble_of_two_architectures(
    parent: Path, vocabs: dict[str, Path], corpora: dict[str, Path], tmp_path: Path
) -> None:
    """NT5 §4.4: models of different shapes sharing one dictionary decode together; the
    weighted ensemble's next-token distribution is the weighted mixture of the members'."""
    import torch

    tiny = {**PARENT, "arch": "mtcore_transformer_tiny", "max_update": 4}
    train(tmp_path / "tiny", tiny | {"save_interval_updates": 2}, vocabs["data_a"])
    common = {"corpus": corpora["test"], "spm": vocabs["spm_a"]}
    settings = {"src": "en", "tgt": "ja", "beam": 2, "threads": 1}
    weighted = {**settings, "weights": {"model": 1.0, "model2": 3.0}}
    roles = {
        "micro": ({"model": parent}, settings),
        "tiny": ({"model": tmp_path / "tiny/model"}, settings),
        "ensemble": ({"model": parent, "model2": tmp_path / "tiny/model"}, weighted),
    }
    lines = (corpora["test"] / "corpus.en").read_text(encoding="utf-8").splitlines()[:4]
    found = {}
    for name, (models, config) in roles.items():
        step = TranslateStep.from_dict(config)
        ctx = make_ctx(tmp_path / name, "translate", **models, **common)
        step.run(ctx)
        assert ctx.stats["translate.lines"] == 12
        found[name] = first_step_log_probs(Translator(step.config, ctx), lines)  # type: ignore[arg-type]
    mixture = torch.logsumexp(
        torch.stack([found["micro"] + math.log(0.25), found["tiny"] + math.log(0.75)]), dim=0
    )
    assert torch.allclose(found["ensemble"], mixture, atol=1e-5)
    for single in ("micro", "tiny"):
        assert float((found["ensemble"] - found[single]).abs().max()) > 1e-2


def test_ensemble_dictionaries_must_match(
    parent: Path, vocabs: dict[str, Path], corpora: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    shutil.copytree(parent, other)
    lines = (other / "dict.ja.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4], lines[5] = lines[5], lines[4]  # two entries trade places: same size, other ids
    (other / "dict.ja.txt").write_text("".join(lines), encoding="utf-8")
    ctx = make_ctx(
        tmp_path / "tr", "translate", model=parent, model2=other, corpus=corpora["test"],
        spm=vocabs["spm_a"],
    )  # fmt: skip
    with pytest.raises(DataError, match=r"input model2 .*dict\.ja\.txt line 5 is"):
        TranslateStep.from_dict({"src": "en", "tgt": "ja"}).run(ctx)


@pytest.mark.slow
def test_two_processes_through_torchrun_on_cpu(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """fairseq's torch.distributed training, two gloo processes on CPU: each update sees both
    processes' batches."""
    ctx = train(tmp_path, {**PARENT, "distributed_world_size": 2}, vocabs["data_a"])
    log = tmp_path / "model/train.log"
    text = log.read_text(encoding="utf-8")
    assert "distributed init (rank 0)" in text and "distributed init (rank 1)" in text
    assert "'ddp_backend': 'legacy_ddp'" in text and "'distributed_backend': 'gloo'" in text
    assert ctx.metrics["updates"] == 10 and (tmp_path / "model/checkpoint.pt").exists()
    # the parent trained in one process with the same settings on the same data
    single = records(parent / "train.log", "train_inner")
    double = records(log, "train_inner")
    ratio = sum(float(r["wpb"]) for r in double) / sum(float(r["wpb"]) for r in single)
    assert 1.6 < ratio < 2.4


# Per-update training loss at 2 ranks x 1 batch against 1 rank x 2 batches: the same batches
# (fairseq shards an epoch's batches by rank in order, so rank r holds batch 2k+r of update k,
# the batches one rank accumulates in that order), summed in another order. Measured on this
# machine: the same loss at all 8 updates to the 3 decimals fairseq logs, and bit-identical
# weights. The tolerance is for wider runs, whose sums of more terms change with the order.
WIDTH_TOLERANCE = 1e-4


@pytest.mark.slow
def test_two_ranks_give_the_loss_curve_of_one_rank_with_twice_the_accumulation(
    vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """A training stated as tokens per update (``batch_tokens``) at two gloo ranks and at one:
    ``update_freq`` 1 and 2, the same loss at every update. Dropout is off: fairseq seeds each
    rank's dropout by the update number, so with dropout the masks (not the math) differ with
    the width."""
    config = {**PARENT, "batch_tokens": 2048, "dropout": 0.0, "max_update": 8}
    curves = {}
    for ranks in (1, 2):
        ctx = make_ctx(tmp_path / f"r{ranks}", "train", data=vocabs["data_a"])
        ctx.ranks = ranks
        TrainStep.from_dict(config).run(ctx)
        assert ctx.metrics["ranks"] == ranks and ctx.metrics["update_freq"] == 2 // ranks
        log = tmp_path / f"r{ranks}/model/train.log"
        curves[ranks] = [float(r["loss"]) for r in records(log, "train_inner")]
        text = log.read_text(encoding="utf-8")
        assert ("distributed init (rank 1)" in text) == (ranks == 2)
    assert len(curves[1]) == len(curves[2]) == 8
    for one, two in zip(curves[1], curves[2], strict=True):
        assert abs(one - two) <= WIDTH_TOLERANCE * abs(one), (curves[1], curves[2])
    # two ranks sum two gradients, and a + b == b + a in floating point: the same weights
    one, two = (load(tmp_path / f"r{r}/model/checkpoint.pt")["model"] for r in (1, 2))
    assert all(one[k].equal(two[k]) for k in one)


@pytest.mark.slow
def test_two_processes_continue_from_a_checkpoint(
    parent: Path, vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """A model continued (``init``) in two processes, as a paper profile's continued stages
    train on 8 GPUs: fairseq loads the checkpoint on rank 0 and would send it to the others as
    a pickle that torch's weights-only loader refuses (its cfg is an OmegaConf DictConfig);
    every rank reads the file itself instead (found by the Yishu rehearsal)."""
    config = {**PARENT, "distributed_world_size": 2, "max_update": 4, "save_interval_updates": 2}
    ctx = train(tmp_path, config, vocabs["data_a"], init=parent)
    text = (tmp_path / "model/train.log").read_text(encoding="utf-8")
    assert "distributed init (rank 1)" in text and "'load_checkpoint_on_all_dp_ranks': True" in text
    assert ctx.metrics["updates"] == 4 and (tmp_path / "model/checkpoint.pt").exists()


def test_cycled_data_trains_on_all_of_train_and_one_part_an_epoch(
    corpora: dict[str, Path], vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """Tran et al. (2021)'s sharding (Yishu §3.1): binarize cuts the cycled corpus (here 301
    back-translation-like pairs) into three parts, each a shard directory beside the whole train
    split, with one dictionary over both; fairseq trains epoch e on shard (e - 1) mod 3."""
    from mtcore.data.corpus import CorpusWriter
    from mtcore_plugins.steps.binarize import mmap_length

    with (
        open(DATA / "train.en", encoding="utf-8") as en,
        open(DATA / "train.ja", encoding="utf-8") as ja,
        CorpusWriter(tmp_path / "bt", ("en", "ja")) as writer,
    ):
        for pair in itertools.islice(zip(en, ja, strict=True), 1000, 1300):
            writer.write(tuple(side.rstrip("\n") for side in pair))
        writer.write(("Ω only here .", "Ω"))  # a piece the train split lacks
    inputs = {
        "train": corpora["train"],
        "valid": corpora["valid"],
        "spm": vocabs["spm_a"],
        "cycled": tmp_path / "bt",
    }
    config = {"src": "en", "tgt": "ja", "cycle_parts": 3}
    BinarizeStep.from_dict(config).run(make_ctx(tmp_path / "bin", "bin", **inputs))
    data = tmp_path / "bin" / "data"
    meta = Artifact.open(data).meta
    assert (meta["cycle_parts"], meta["cycle_lines"]) == (3, [101, 100, 100])
    assert "Ω" in (data / "dict.en.txt").read_text(encoding="utf-8").split()
    for k, count in enumerate(meta["cycle_lines"]):
        shard = data / "cycle" / str(k)
        assert mmap_length(shard / "train1.en-ja.ja.idx") == count
        assert mmap_length(shard / "train.en-ja.en.idx") == meta["lines"]["train"]
        for name in ("dict.ja.txt", "valid.en-ja.en.bin"):
            assert (shard / name).read_bytes() == (data / name).read_bytes()
    # fewer cycled lines than parts (a synthetic corpus its filters emptied): the empty parts
    # add nothing to their epochs
    with CorpusWriter(tmp_path / "one", ("en", "ja")) as writer:
        writer.write(("Ω only here .", "Ω"))
    few = make_ctx(tmp_path / "few", "bin", **{**inputs, "cycled": tmp_path / "one"})
    BinarizeStep.from_dict(config).run(few)
    assert Artifact.open(tmp_path / "few" / "data").meta["cycle_lines"] == [1, 0, 0]
    assert few.stats["binarize.cycled_empty_parts"] == 2
    short = train(tmp_path / "short", {**MICRO, "max_epoch": 3}, tmp_path / "few" / "data")
    assert (short.work / "model" / "checkpoint.pt").exists()
    with pytest.raises(DataError, match="cycle_parts"):
        BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(
            make_ctx(tmp_path / "bin2", "bin", **inputs)
        )

    ctx = train(tmp_path / "train", {**MICRO, "max_epoch": 4, "lr": 0.003}, data)
    log = (ctx.work / "model" / "train.log").read_text(encoding="utf-8")
    # the shard each epoch trained on: the last one loaded before the epoch began (fairseq
    # loads the next epoch's at the end of each)
    shard, trained = None, []
    for line in log.splitlines():
        if found := re.search(
            r"loaded [\d,]+ examples from: \S+/cycle/(\d)/train1\.en-ja\.en$", line
        ):
            shard = int(found.group(1))
        elif found := re.search(r"begin training epoch (\d+)", line):
            trained.append((int(found.group(1)), shard))
    assert trained == [(1, 0), (2, 1), (3, 2), (4, 0)]


def test_training_data_without_pairs_is_a_clear_error(
    corpora: dict[str, Path], vocabs: dict[str, Path], tmp_path: Path
) -> None:
    """A filter that drops every pair leaves binarize an empty train split: the train step
    names the data and the cause instead of fairseq's traceback. Fine-tuning on the valid
    split (``--train-subset valid``) of such data is allowed."""
    from mtcore.data.corpus import CorpusWriter

    with CorpusWriter(tmp_path / "empty", ("en", "ja")):
        pass
    inputs = {"train": tmp_path / "empty", "valid": corpora["valid"], "spm": vocabs["spm_a"]}
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(make_ctx(tmp_path / "b", "b", **inputs))
    with pytest.raises(DataError, match="has no train pairs"):
        train(tmp_path / "t", {**MICRO, "max_update": 2}, tmp_path / "b" / "data")
    on_valid = {**MICRO, "max_update": 2, "extra_args": ["--train-subset", "valid"]}
    ctx = train(tmp_path / "v", on_valid, tmp_path / "b" / "data")
    assert (ctx.work / "model" / "checkpoint.pt").exists()

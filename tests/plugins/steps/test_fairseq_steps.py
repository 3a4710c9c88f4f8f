"""The fairseq path: spm -> binarize -> train -> translate, on a real en-ja slice, on CPU."""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import DataError, StepError
from mtcore.contracts.step import Artifact, StepContext
from mtcore.data.corpus import Corpus, CorpusWriter
from mtcore_plugins.steps.binarize import BinarizeStep, mmap_length
from mtcore_plugins.steps.spm import SentencePieceStep, _sample, temperature_quotas
from mtcore_plugins.steps.train import (
    TrainStep,
    parse_train_log,
    repair_last_checkpoint,
    select_checkpoints,
)
from mtcore_plugins.steps.translate import TranslateStep, Translator
from tests.support import ROOT
from tests.support.steps import make_ctx

DATA = Path("/work/shared/data/en-ja/odashi+small_parallel_enja")
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="small_parallel_enja not available")

# Lines every corpus carries besides real data: an empty pair, a pair that encodes to zero
# pieces (whitespace, a control character nmt_nfkc removes) and a one-sided pair.
EDGE = [("", ""), ("   ", "\x01"), ("hello .", "")]
# A model small enough to take dozens of updates in seconds on one CPU core.
MICRO = [
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
    "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]  # fmt: skip
TRAIN = {
    "max_update": 40,
    "max_tokens": 1024,
    "lr": 0.003,
    "warmup_updates": 10,
    "dropout": 0.1,
    "save_interval_updates": 10,
    "keep_last": 3,
    "average_last": 3,
    "log_interval": 5,
    "threads": 1,
    "extra_args": MICRO,
}


def write_corpus(path: Path, split: str, lines: int, extra: list[tuple[str, str]]) -> Path:
    with (
        open(DATA / f"{split}.en", encoding="utf-8") as en,
        open(DATA / f"{split}.ja", encoding="utf-8") as ja,
        CorpusWriter(path, ("en", "ja")) as writer,
    ):
        for pair in itertools.islice(zip(en, ja, strict=True), lines):
            writer.write(tuple(side.rstrip("\n") for side in pair))
        writer.write_all(extra)
    return path


@pytest.fixture(scope="session")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corpora")
    return {
        "train": write_corpus(root / "train", "train", 2000, EDGE),
        "valid": write_corpus(root / "valid", "dev", 500, EDGE[:1]),
        # 48 lines: a multiple of neither the batch size nor the chunk size used below
        "test": write_corpus(root / "test", "test", 44, [*EDGE, ("the " * 600, "長い")]),
    }


@pytest.fixture(scope="session")
def spm_model(corpora: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("spm")
    SentencePieceStep.from_dict({"vocab_size": 2000}).run(
        make_ctx(work, "spm", corpus=corpora["train"])
    )
    return work / "model"


@pytest.fixture(scope="session")
def binarized(corpora: dict[str, Path], spm_model: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("binarize")
    ctx = make_ctx(work, "binarize", train=corpora["train"], valid=corpora["valid"], spm=spm_model)
    BinarizeStep.from_dict({"src": "en", "tgt": "ja", "workers": 2}).run(ctx)
    return work / "data", ctx


@pytest.fixture(scope="session")
def trained(binarized, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("train")
    ctx = make_ctx(work, "train", data=binarized[0])
    TrainStep.from_dict(TRAIN).run(ctx)
    return work / "model", ctx


# --- spm ---------------------------------------------------------------------------------


def test_spm_is_deterministic_and_joint(corpora: dict[str, Path], tmp_path: Path) -> None:
    import sentencepiece as spm

    config = {"vocab_size": 1500, "num_threads": 2}
    for run in ("a", "b"):
        SentencePieceStep.from_dict(config).run(
            make_ctx(tmp_path / run, "spm", corpus=corpora["train"])
        )
    for name in ("spm.model", "spm.vocab"):
        assert (tmp_path / "a/model" / name).read_bytes() == (
            tmp_path / "b/model" / name
        ).read_bytes()
    meta = Artifact.open(tmp_path / "a/model").meta
    assert meta["type"] == "sentencepiece" and meta["langs"] == ["en", "ja"]
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "a/model/spm.model"))
    assert processor.get_piece_size() == meta["vocab_size"] == 1500
    vocab = (tmp_path / "a/model/spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 1500 and vocab[0].split("\t")[0] == "<unk>"
    for text in ("i 'm in the tennis club .", "私 は テニス 部員 で す 。"):  # both scripts covered
        assert processor.unk_id() not in processor.encode(text)


def test_spm_training_leaves_the_process_stderr_alone(
    corpora: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SentencePiece's ``logstream`` swaps fd 2 for its log while it trains and closes and
    restores it after: in the driver, where other steps run in threads, another step's log
    opened in that gap became fd 2 (a KenLM step then failed on ``Illegal seek`` and the run's
    stderr was closed: ``make nt5`` ended with status 1 and no message). The step trains in a
    process of its own: this process's trainer is never called and its fd 2 is the same file
    after; the model is the one spm trains in-process on the same sentences and seed."""
    import sentencepiece as spm

    calls = []
    train = spm.SentencePieceTrainer.Train

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("logstream"))
        return train(*args, **kwargs)

    monkeypatch.setattr(spm.SentencePieceTrainer, "Train", spy)
    before = os.fstat(2)
    step = SentencePieceStep.from_dict({"vocab_size": 1000, "seed": 3})
    step.run(make_ctx(tmp_path / "w", "spm", corpus=corpora["train"]))
    after = os.fstat(2)
    assert calls == [] and (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    # the same training in this process, as the step did before
    corpus = Corpus.open(corpora["train"])
    lines = [
        line.rstrip("\n")
        for path in corpus.files()
        for line in path.open(encoding="utf-8", newline="\n")
        if line.strip()
    ]
    buffer = io.BytesIO()
    spm.set_random_generator_seed(3)
    with open(tmp_path / "inline.log", "w") as log:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(lines), model_writer=buffer, logstream=log,
            **step._trainer_options(),
        )  # fmt: skip
    assert (tmp_path / "w/model/spm.model").read_bytes() == buffer.getvalue()


def test_spm_user_defined_symbols_stay_one_piece(corpora: dict[str, Path], tmp_path: Path):
    import sentencepiece as spm

    line = "<BT> i 'm in the <blank> club ."
    ids = {}
    for run, symbols in (("plain", []), ("tags", ["<BT>", "<blank>"])):
        config = {"vocab_size": 1500, "num_threads": 2, "user_defined_symbols": symbols}
        SentencePieceStep.from_dict(config).run(
            make_ctx(tmp_path / run, "spm", corpus=corpora["train"])
        )
        model = spm.SentencePieceProcessor(model_file=str(tmp_path / run / "model/spm.model"))
        tags = [model.piece_to_id(tag) for tag in ("<BT>", "<blank>")]
        ids[run] = (tags, model.encode(line), model.unk_id())
    # Unseen, the tags are unknown (one <unk> each, indistinguishable); declared, each is a
    # piece of its own that encoding finds.
    tags, encoded, unk = ids["plain"]
    assert tags == [unk, unk] and encoded.count(unk) >= 2
    tags, encoded, unk = ids["tags"]
    assert unk not in tags and unk not in encoded and all(t in encoded for t in tags)
    with pytest.raises(ValueError, match="no spaces"):
        SentencePieceStep.from_dict({"user_defined_symbols": ["<B T>"]})


def test_spm_vocab_too_small_is_explained(corpora: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(StepError, match="vocab_size"):
        SentencePieceStep.from_dict({"vocab_size": 50}).run(
            make_ctx(tmp_path, "spm", corpus=corpora["train"])
        )


def test_temperature_quotas_flatten_the_language_distribution() -> None:
    counts = {"en": 800, "ja": 200, "xx": 0}
    assert temperature_quotas(counts, 1.0, 0) == {"en": 800, "ja": 200, "xx": 0}
    # p ∝ 0.8 ** 0.2 : 0.2 ** 0.2 = 0.9564 : 0.7248 -> 56.89 % : 43.11 %
    assert temperature_quotas(counts, 5.0, 0) == {"en": 569, "ja": 431, "xx": 0}
    assert temperature_quotas(counts, 5.0, 100) == {"en": 57, "ja": 43, "xx": 0}
    assert temperature_quotas(counts, 1000.0, 0) == {"en": 500, "ja": 500, "xx": 0}
    assert temperature_quotas({"en": 0}, 5.0, 0) == {"en": 0}


def test_spm_temperature_samples_each_language_to_its_share(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    """Bitext plus four times as much English monolingual text: at T = 5 Japanese gets 42 %
    of the training sentences instead of 17 % (its text repeated), and more of the vocabulary."""
    import sentencepiece as spm

    mono = tmp_path / "mono"
    with open(DATA / "train.en", encoding="utf-8") as en, CorpusWriter(mono, ("en",)) as writer:
        for line in itertools.islice(en, 2000, 10000):
            writer.write((line.rstrip("\n"),))
    runs = {}
    for run, temperature in (("t1", 1.0), ("t5", 5.0), ("t5b", 5.0)):
        ctx = make_ctx(tmp_path / run, "spm", corpus=corpora["train"], mono=mono)
        config = {"vocab_size": 1500, "num_threads": 1, "temperature": temperature}
        SentencePieceStep.from_dict(config).run(ctx)
        model = spm.SentencePieceProcessor(model_file=str(tmp_path / run / "model/spm.model"))
        pieces = [model.id_to_piece(i) for i in range(model.get_piece_size())]
        japanese = sum(any("\u3040" <= ch <= "\u9fff" for ch in piece) for piece in pieces)
        runs[run] = (ctx, japanese, (tmp_path / run / "model/spm.model").read_bytes())
    ctx, japanese_t1, _ = runs["t1"]
    assert ctx.stats["spm.en.sentences"] == 2001 + 8000 and ctx.stats["spm.ja.sentences"] == 2001
    ctx, japanese_t5, model_t5 = runs["t5"]
    counts = {"en": 10001, "ja": 2001}
    quotas = temperature_quotas(counts, 5.0, 0)
    assert quotas["ja"] > 0.4 * sum(quotas.values())
    for lang in counts:
        assert ctx.stats[f"spm.{lang}.sentences"] == counts[lang]
        assert ctx.stats[f"spm.{lang}.sampled"] == quotas[lang]
    assert ctx.metrics["language_shares"]["ja"] == pytest.approx(quotas["ja"] / 12002, abs=1e-6)
    assert japanese_t5 > japanese_t1 * 1.1, (japanese_t1, japanese_t5)
    assert runs["t5b"][2] == model_t5  # the sample is seeded
    assert Artifact.open(tmp_path / "t5/model").meta["temperature"] == 5.0


def test_spm_sample_repeats_then_selects(tmp_path: Path) -> None:
    text = tmp_path / "x.txt"
    text.write_text("a\n\nb\nc\nd\n", encoding="utf-8")  # the empty line is never drawn
    for quota in (0, 2, 4, 6, 9):
        drawn = list(_sample([text], 4, quota, random.Random(quota)))
        assert len(drawn) == quota
        copies, extra = divmod(quota, 4)
        assert drawn[: 4 * copies] == ["a", "b", "c", "d"] * copies
        rest = drawn[4 * copies :]
        assert len(set(rest)) == extra and rest == sorted(rest)  # distinct, in corpus order


# --- binarize ----------------------------------------------------------------------------


def test_binarize_keeps_every_line(binarized, corpora: dict[str, Path]) -> None:
    data, ctx = binarized
    meta = Artifact.open(data).meta
    assert meta["type"] == "fairseq-data" and (meta["src"], meta["tgt"]) == ("en", "ja")
    assert meta["lines"] == {"train": 2003, "valid": 501}
    for split, lines in meta["lines"].items():
        for lang in ("en", "ja"):
            assert mmap_length(data / f"{split}.en-ja.{lang}.idx") == lines
    assert ctx.stats["binarize.train_empty"] == 5  # both sides of two pairs, one side of another
    assert (data / "dict.en.txt").read_bytes() == (data / "dict.ja.txt").read_bytes()
    assert "Wrote preprocessed data" in (data / "binarize.log").read_text()


def test_binarize_reuses_a_given_dictionary(
    binarized, corpora: dict[str, Path], spm_model: Path, tmp_path: Path
) -> None:
    """Fine-tuning data binarized on its own would get its own dictionary; with the parent's
    as input it indexes tokens exactly as the parent does, whatever it contains."""
    data, _ = binarized
    ctx = make_ctx(
        tmp_path,
        "binarize",
        train=corpora["valid"],
        valid=corpora["valid"],
        spm=spm_model,
        dictionary=data,
    )
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(ctx)
    for lang in ("en", "ja"):
        assert (tmp_path / "data" / f"dict.{lang}.txt").read_bytes() == (
            data / "dict.en.txt"
        ).read_bytes()
    # killed after fairseq-preprocess wrote its files (issue: FileExistsError dict.en.txt on
    # every later run): the rerun in the same partial directory starts the output over
    first = {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir() if "log" not in p.name}
    (tmp_path / "data" / "train.en-ja.en.bin").write_bytes(b"torn")
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(ctx)
    again = {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir() if "log" not in p.name}
    assert again == first
    alone = make_ctx(
        tmp_path / "alone",
        "binarize",
        train=corpora["valid"],
        valid=corpora["valid"],
        spm=spm_model,
    )
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(alone)
    assert (tmp_path / "alone" / "data" / "dict.en.txt").read_bytes() != (
        data / "dict.en.txt"
    ).read_bytes()


def test_binarize_samples_source_segmentations(
    corpora: dict[str, Path], spm_model: Path, tmp_path: Path
) -> None:
    """Subword regularization on the source side (Yishu §2.1.3): every training source is
    segmented by a sampled segmentation of the same text, ``copies`` times, the target keeps
    its best segmentation, validation data is untouched, and a seed fixes the samples."""
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_file=str(spm_model / "spm.model"))
    encoded = {}
    for run, seed in (("a", 1), ("b", 1), ("c", 2)):
        ctx = make_ctx(
            tmp_path / run, "binarize", train=corpora["train"], valid=corpora["valid"],
            spm=spm_model,
        )  # fmt: skip
        config = {"src": "en", "tgt": "ja", "src_sampling": {"alpha": 0.2, "copies": 2,
                  "seed": seed}}  # fmt: skip
        BinarizeStep.from_dict(config).run(ctx)
        data = tmp_path / run / "data"
        assert Artifact.open(data).meta["lines"] == {"train": 2 * 2003, "valid": 501}
        assert mmap_length(data / "train.en-ja.en.idx") == 2 * 2003
        scratch = tmp_path / run / ".scratch/encoded"
        encoded[run] = {
            name: (scratch / name).read_text(encoding="utf-8").splitlines()
            for name in ("train.en", "train.ja", "valid.en")
        }
    a = encoded["a"]
    src = [line.rstrip("\n") for line in (corpora["train"] / "corpus.en").open(encoding="utf-8")]
    best = [" ".join(pieces) for pieces in model.encode(src, out_type=str)]
    tgt = [line.rstrip("\n") for line in (corpora["train"] / "corpus.ja").open(encoding="utf-8")]
    tgt_best = [" ".join(pieces) for pieces in model.encode(tgt, out_type=str)]
    first, second = a["train.en"][:2003], a["train.en"][2003:]
    assert a["train.ja"] == tgt_best + tgt_best
    for copy in (first, second):
        # the same text (spm's normalization), segmented otherwise in most sentences
        assert [model.decode(line.split()) for line in copy] == [
            model.decode(line.split()) for line in best
        ]
        changed = sum(x != y for x, y in zip(copy, best, strict=True))
        assert changed > 0.5 * 2003, changed
    assert sum(x != y for x, y in zip(first, second, strict=True)) > 0.5 * 2003
    valid = [line.rstrip("\n") for line in (corpora["valid"] / "corpus.en").open(encoding="utf-8")]
    assert a["valid.en"] == [" ".join(p) for p in model.encode(valid, out_type=str)]
    assert encoded["b"] == a and encoded["c"]["train.en"] != a["train.en"]
    with pytest.raises(ValueError, match="alpha"):
        BinarizeStep.from_dict({"src": "en", "tgt": "ja", "src_sampling": {"alpha": 0}})


def test_binarize_rejects_missing_language(
    corpora: dict[str, Path], spm_model: Path, tmp_path: Path
) -> None:
    ctx = make_ctx(
        tmp_path, "binarize", train=corpora["train"], valid=corpora["valid"], spm=spm_model
    )
    with pytest.raises(DataError, match="'de'"):
        BinarizeStep.from_dict({"src": "en", "tgt": "de"}).run(ctx)


# --- train (fast parts) ------------------------------------------------------------------


def test_train_command_never_drops_batches_and_uses_no_user_dir(tmp_path: Path) -> None:
    step = TrainStep.from_dict({"lr_scheduler": "polynomial_decay", "max_update": 100})
    cmd = step.command(tmp_path, {"src": "en", "tgt": "ja"}, tmp_path / "ck")
    assert cmd[cmd.index("--required-batch-size-multiple") + 1] == "1"
    assert "--user-dir" not in cmd and "--warmup-init-lr" not in cmd
    assert cmd[cmd.index("--total-num-update") + 1] == "100"
    assert step.plugins_used() == [("models", "transformer_presets")]


def test_presets_register_twice() -> None:
    from fairseq.models import ARCH_MODEL_REGISTRY

    from mtcore_plugins.models.presets import TransformerPresets

    TransformerPresets().register()
    TransformerPresets().register()
    assert {"mtcore_transformer_tiny", "mtcore_transformer_big_ffn4096"} <= set(ARCH_MODEL_REGISTRY)


def fake_checkpoint(path: Path, updates: int, weight: float) -> None:
    import torch

    state = {
        "model": {"w": torch.full((2,), weight), "n": torch.tensor([updates])},
        "optimizer_history": [{"num_updates": updates}],
        "last_optimizer_state": {"x": 1},
    }
    torch.save(state, path)


def test_checkpoint_selection_repair_and_averaging(tmp_path: Path) -> None:
    import torch

    from mtcore_plugins.common.fairseq.checkpoints import average_checkpoints

    for updates in (5, 10, 15):
        fake_checkpoint(tmp_path / f"checkpoint_1_{updates}.pt", updates, float(updates))
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 17, 17.0)  # stopped between intervals
    assert [p.name for p in select_checkpoints(tmp_path, 2)] == [
        "checkpoint_1_15.pt",
        "checkpoint_last.pt",
    ]
    assert not repair_last_checkpoint(tmp_path)
    (tmp_path / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 truncated copy")
    assert repair_last_checkpoint(tmp_path)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == (
        tmp_path / "checkpoint_1_15.pt"
    ).read_bytes()
    # killed between writing checkpoint_1_15.pt and copying it: last is missing ...
    (tmp_path / "checkpoint_last.pt").unlink()
    assert repair_last_checkpoint(tmp_path)
    assert (tmp_path / "checkpoint_last.pt").exists()
    # ... or still the previous interval's (older than the newest checkpoint)
    os.utime(tmp_path / "checkpoint_last.pt", ns=(1, 1))
    assert repair_last_checkpoint(tmp_path)
    assert not repair_last_checkpoint(tmp_path)  # now current: left alone
    average_checkpoints(select_checkpoints(tmp_path, 3), tmp_path / "avg.pt")
    averaged = torch.load(tmp_path / "avg.pt", weights_only=True)
    assert (
        averaged["model"]["w"].tolist() == [10.0, 10.0] and "last_optimizer_state" not in averaged
    )


def test_parse_train_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "x | INFO | fairseq.checkpoint_utils | Loaded checkpoint /c/checkpoint_last.pt "
        "(epoch 1 @ 8 updates)\n"
        'x | INFO | train_inner | {"epoch": 1, "loss": "9.5", "num_updates": "10"}\n'
        "x | WARNING | fairseq.tasks.fairseq_task | 1,204 samples have invalid sizes and will be "
        "skipped, max_positions=(512, 512), first few sample ids=[3]\n"
        'x | INFO | valid | {"epoch": 1, "valid_loss": "8.25", "valid_num_updates": "12"}\n'
        'x | INFO | train | {"epoch": 1, "train_loss": "9.0", "train_wps": "1234.5", '
        '"train_num_updates": "12"}\n'
    )
    found = parse_train_log(log)
    assert found["resumed_from_update"] == 8 and found["updates"] == 12
    assert found["valid_loss"] == 8.25 and found["tokens_per_second"] == 1234.5
    assert found["skipped_too_long"] == 1204


@pytest.mark.slow
def test_train_refuses_to_skip_long_examples(binarized, tmp_path: Path) -> None:
    """fairseq's trainer would silently skip every pair over max_tokens; the step stops instead."""
    ctx = make_ctx(tmp_path, "train", data=binarized[0])
    with pytest.raises(StepError, match="examples are longer than max_positions"):
        TrainStep.from_dict({**TRAIN, "max_tokens": 16}).run(ctx)


# --- train, translate (slow) -------------------------------------------------------------


def inner_losses(log: Path) -> list[float]:
    records = re.findall(r"\| train_inner \| (\{.*\})", log.read_text())
    return [float(json.loads(r)["loss"]) for r in records]


@pytest.mark.slow
def test_tiny_model_trains_and_loss_goes_down(trained) -> None:
    model, ctx = trained
    losses = inner_losses(model / "train.log")
    assert len(losses) == 8 and losses[-1] < losses[0] - 2.0
    assert ctx.metrics["updates"] == 40 and ctx.stats["train.updates"] == 40
    assert ctx.metrics["valid_loss"] < 9.0 and ctx.metrics["tokens_per_second"] > 0
    assert sorted(p.name for p in model.iterdir()) == [
        "artifact.json",
        "checkpoint.pt",
        "dict.en.txt",
        "dict.ja.txt",
        "train.log",
    ]
    meta = Artifact.open(model).meta
    assert meta["type"] == "fairseq-model" and meta["models"] == ["transformer_presets"]
    assert (meta["src"], meta["tgt"], meta["arch"]) == ("en", "ja", "mtcore_transformer_tiny")


CHILD = """
import json, sys
from pathlib import Path
from typing import Any
sys.path.insert(0, sys.argv[4])
from tests.support.steps import make_ctx
from mtcore_plugins.steps.train import TrainStep
ctx = make_ctx(Path(sys.argv[1]), "train", data=Path(sys.argv[2]))
TrainStep.from_dict(json.loads(sys.argv[3])).run(ctx)
"""


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def wait_for(condition, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.long  # CI's hour: NT5's kill sweep and test_training_resume.py cover it
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killed_training_resumes_from_checkpoint_last(binarized, tmp_path: Path) -> None:
    config = {**TRAIN, "max_update": 60, "save_interval_updates": 5, "log_interval": 5}
    log = tmp_path / "model/train.log"
    step = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path),
            str(binarized[0]),
            json.dumps(config),
            str(ROOT),
        ]
    )
    try:
        assert wait_for(lambda: log.exists() and "Saved checkpoint" in log.read_text(), 120)
        fairseq = children(step.pid)
        os.kill(step.pid, signal.SIGKILL)  # kill -9 of the step only: fairseq must die with it
        step.wait()
    finally:
        step.kill()
    assert fairseq and wait_for(lambda: not any(alive(p) for p in fairseq), 10)
    saved = [int(n) for n in re.findall(r"Saved checkpoint .* @ (\d+) updates", log.read_text())]
    assert saved and max(saved) < 60 and not (tmp_path / "model/checkpoint.pt").exists()
    ctx = make_ctx(tmp_path, "train", data=binarized[0])
    TrainStep.from_dict(config).run(ctx)
    assert ctx.metrics["resumed_from_update"] >= max(saved) > 0
    assert ctx.metrics["updates"] == 60
    resumed_log = log.read_text().split("Loaded checkpoint")[-1]
    first = json.loads(re.search(r"\| train_inner \| (\{.*\})", resumed_log).group(1))
    assert int(first["num_updates"]) > max(saved)


def translate(trained, corpora, spm_model, work: Path, **config) -> tuple[StepContext, list[str]]:
    ctx = make_ctx(work, "translate", model=trained[0], corpus=corpora["test"], spm=spm_model)
    TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 3, "threads": 1, **config}).run(ctx)
    hyp = work / "hyp/hyp.ja"
    return ctx, hyp.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.slow
def test_translate_one_line_per_input_deterministic(
    trained, corpora, spm_model, tmp_path: Path
) -> None:
    # Same config, same bytes. (Another batch size may flip near-ties: padding changes the
    # float kernels; batch_size is part of the step's config, so of its hash.)
    ctx, first = translate(
        trained, corpora, spm_model, tmp_path / "a", batch_size=7, max_tokens=200
    )
    _, second = translate(trained, corpora, spm_model, tmp_path / "b", batch_size=7, max_tokens=200)
    assert len(first) == 48 and first == second
    assert first[44] == first[45] == ""  # empty and zero-piece inputs
    assert ctx.stats["translate.truncated"] == 1 and ctx.stats["translate.lines"] == 48
    assert ctx.metrics["sentences_per_second"] > 0
    assert Artifact.open(tmp_path / "a/hyp").meta["lines"] == 48


@pytest.mark.slow
def test_translate_rejects_wrong_direction(trained, corpora, spm_model, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="translates en->ja, not ja->en"):
        ctx = make_ctx(
            tmp_path, "translate", model=trained[0], corpus=corpora["test"], spm=spm_model
        )
        TranslateStep.from_dict({"src": "ja", "tgt": "en"}).run(ctx)


@pytest.mark.slow
def test_translate_keeps_input_order(
    trained, corpora, spm_model, tmp_path: Path, monkeypatch
) -> None:
    """With an identity "model" each output must be its own input: batches are sorted by length
    and cut across chunks, so any mix-up shows."""

    def echo(self: Translator, sources: list) -> list[str]:
        return [self.spm.decode_pieces(self.src_dict.string(s).split()) for s in sources]

    monkeypatch.setattr(Translator, "_generate", echo)
    ctx, out = translate(trained, corpora, spm_model, tmp_path, batch_size=7, chunk_lines=10)
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model / "spm.model"))
    sources = (corpora["test"] / "corpus.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(out) == len(sources) == 48
    for source, hyp in zip(sources[:47], out[:47], strict=True):
        assert hyp == processor.decode(processor.encode(source))
    assert out[47] == " ".join(["the"] * 511)  # truncated to 512 positions with EOS, not dropped


RELOAD = """
import sys
from pathlib import Path
from typing import Any
import torch, pickle
checkpoint = Path(sys.argv[1])
try:
    torch.load(checkpoint, weights_only=True)
except pickle.UnpicklingError:
    print("safe loader refuses without safe globals")
from mtcore_plugins.common.fairseq.setup import add_safe_globals, register_models
add_safe_globals()
register_models(["transformer_presets"])
from fairseq import checkpoint_utils
models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
    [str(checkpoint)], arg_overrides={"data": str(checkpoint.parent)})
print(type(models[0]).__name__, cfg.model.arch, sum(p.numel() for p in models[0].parameters()))
"""


@pytest.mark.slow
def test_checkpoint_reloads_in_fresh_process(trained) -> None:
    checkpoint = trained[0] / "checkpoint.pt"
    done = subprocess.run(
        [sys.executable, "-c", RELOAD, str(checkpoint)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "safe loader refuses without safe globals" in done.stdout
    assert "TransformerModel mtcore_transformer_tiny" in done.stdout

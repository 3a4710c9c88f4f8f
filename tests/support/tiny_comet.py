"""Tiny random COMET models built offline, in the layout ``comet.download_model`` leaves:
``hparams.yaml`` + ``checkpoints/model.ckpt``. The encoder is a two-layer XLM-R whose
SentencePiece vocabulary is trained on real English and Japanese lines of the WMT22 en-ja test
set; the heads are comet's own classes (RegressionMetric as in wmt22-comet-da, UnifiedMetric
with ``input_segments: [mt, src]`` as in wmt22-cometkiwi-da, XCOMETMetric) with small sizes and
seeded random weights, saved as a Lightning checkpoint holds them, so that comet's own
``load_from_checkpoint`` loads them too and the tests can compare the two loaders."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml

from tests.support import ROOT

WMT22 = ROOT.parent / "shared" / "data" / "en-ja" / "wmt-conference+wmt22-news-systems" / "txt"
SOURCE = WMT22 / "sources" / "generaltest2022.en-ja.src.en"
REFERENCE = WMT22 / "references" / "generaltest2022.en-ja.ref.A.ja"
SYSTEMS = ("NT5", "Online-A", "DLUT")
TRAIN_LINES = 300  # the vocabulary is learnt on these; tests score later lines

KINDS = ("comet", "cometkiwi", "xcomet", "comet_qe")
HEAD = {
    "hidden_sizes": [16],
    "dropout": 0.1,  # dropout layers exist, so eval mode is what makes scoring deterministic
    "nr_frozen_epochs": 0.3,
    "keep_embeddings_frozen": True,
    "encoder_model": "XLM-RoBERTa",
    "batch_size": 4,
}


def wmt22_lines(start: int, count: int) -> dict[str, list[str]]:
    """Raw (unsegmented) lines ``start..start+count`` of WMT22 en-ja: ``src`` (English),
    ``ref`` (Japanese) and one Japanese list per system of :data:`SYSTEMS`."""
    files = {"src": SOURCE, "ref": REFERENCE}
    files.update(
        {
            name: WMT22 / "system-outputs" / f"generaltest2022.en-ja.hyp.{name}.ja"
            for name in SYSTEMS
        }
    )
    out = {}
    for key, path in files.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        out[key] = lines[start : start + count]
    return out


def build_encoder(dest: Path) -> Path:
    """A tokenizer + ``config.json`` directory that ``XLMRobertaTokenizerFast.from_pretrained(
    dest, local_files_only=True)`` loads: the shape of xlm-roberta-large's, at hidden size 32."""
    import sentencepiece as spm
    from transformers import XLMRobertaConfig, XLMRobertaTokenizerFast

    lines = wmt22_lines(0, TRAIN_LINES)
    dest.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines["src"] + lines["ref"]), model_writer=model,
        vocab_size=2000, hard_vocab_limit=False, model_type="unigram",
        character_coverage=0.9995, minloglevel=2,
    )  # fmt: skip
    pieces = dest.parent / f".{dest.name}.spm.model"
    pieces.write_bytes(model.getvalue())
    tokenizer = XLMRobertaTokenizerFast(vocab_file=str(pieces))
    tokenizer.save_pretrained(dest)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=514, type_vocab_size=1,
        initializer_range=0.3, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    config.save_pretrained(dest)
    return dest


def comet_model(kind: str, encoder: Path, seed: int = 0) -> Any:
    """A comet model object of ``kind`` (see :data:`KINDS`) with seeded random weights."""
    import torch
    from comet.models import ReferencelessRegression, RegressionMetric, UnifiedMetric, XCOMETMetric

    torch.manual_seed(seed)
    common: dict[str, Any] = dict(
        HEAD, pretrained_model=str(encoder), load_pretrained_weights=False, local_files_only=True
    )
    if kind == "comet":
        model = RegressionMetric(
            **common, layer="mix", layer_transformation="sparsemax", layer_norm=True, pool="avg"
        )
    elif kind == "cometkiwi":
        model = UnifiedMetric(
            **common, sent_layer="mix", layer_transformation="sparsemax", layer_norm=True,
            word_layer=2, input_segments=["mt", "src"], word_level_training=False,
        )  # fmt: skip
    elif kind == "xcomet":
        model = XCOMETMetric(
            **common, sent_layer="mix", layer_transformation="softmax", layer_norm=False,
            word_layer=2,
        )  # fmt: skip
    elif kind == "comet_qe":  # referenceless_regression_metric, as wmt21-comet-qe-da
        model = ReferencelessRegression(
            **common, layer="mix", layer_transformation="sparsemax", layer_norm=False, pool="avg"
        )
    else:
        raise ValueError(f"unknown tiny COMET kind {kind!r}: one of {KINDS}")
    with torch.no_grad():  # upper layers weigh more (sparsemax keeps the top two layers):
        # the embedding layer alone would give every CLS token the same vector
        weights = model.layerwise_attention.scalar_parameters
        for i, weight in enumerate(weights):
            weight.fill_(i / (len(weights) - 1))
    return model.eval()


def save_model(model: Any, dest: Path, legacy_position_ids: bool = False) -> Path:
    """``dest/hparams.yaml`` and ``dest/checkpoints/model.ckpt`` as Lightning writes them;
    ``legacy_position_ids`` adds the position-ids buffer older transformers saved (the released
    checkpoints hold it; transformers no longer has it in the state dict)."""
    import pytorch_lightning
    import torch

    hparams = dict(model.hparams)
    hparams["class_identifier"] = model.hparams.class_identifier
    (dest / "checkpoints").mkdir(parents=True, exist_ok=True)
    (dest / "hparams.yaml").write_text(yaml.safe_dump(hparams), encoding="utf-8")
    state = model.state_dict()
    if legacy_position_ids:
        positions = model.encoder.model.config.max_position_embeddings
        state["encoder.model.embeddings.position_ids"] = torch.arange(positions)[None]
    checkpoint = {
        "epoch": 0,
        "global_step": 0,
        "pytorch-lightning_version": pytorch_lightning.__version__,
        "state_dict": state,
        "hparams_name": "kwargs",
        "hyper_parameters": hparams,
    }
    torch.save(checkpoint, dest / "checkpoints" / "model.ckpt")
    return dest


def build_all(root: Path) -> dict[str, Path]:
    """The shared encoder (``root/encoder``) and one model directory per kind
    (``root/<kind>``, its hparams naming the encoder by absolute path)."""
    encoder = build_encoder(root / "encoder")
    out = {"encoder": encoder}
    for seed, kind in enumerate(KINDS):
        model = comet_model(kind, encoder, seed=seed)
        out[kind] = save_model(model, root / kind, legacy_position_ids=kind == "comet")
    return out

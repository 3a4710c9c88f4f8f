"""A tiny random MetricX, made offline in the layout ``fetch_model`` (``metric: metricx``) leaves:
``config.json`` (an mT5 with mT5's 250,112-entry vocabulary, so the regression id 250089
exists, and d_model 32), ``model.safetensors``, ``tokenizer/spiece.model`` (a unigram
SentencePiece model trained on real English, Japanese and Chinese lines, with T5's special ids)
and ``mtcore-model.json``.

The weights are random but for the regression row of the language-model head, fitted (least
squares, through transformers' own ``MT5ForConditionalGeneration``) so that scores of real
inputs spread over the middle of [0, 25] instead of half of them clamping to 0: batching,
deduplication and the independent check then compare numbers, not zeros."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support import ROOT

SHARED = ROOT.parent / "shared" / "data"
WMT22 = "wmt-conference+wmt22-news-systems/txt"
EN_JA = SHARED / "en-ja" / WMT22
ZH_EN = SHARED / "zh-en" / WMT22
FILES = {
    "en_ja_src": EN_JA / "sources/generaltest2022.en-ja.src.en",
    "en_ja_ref": EN_JA / "references/generaltest2022.en-ja.ref.A.ja",
    "en_ja_hyp": EN_JA / "system-outputs/generaltest2022.en-ja.hyp.NT5.ja",
    "zh_en_src": ZH_EN / "sources/generaltest2022.zh-en.src.zh",
    "zh_en_ref": ZH_EN / "references/generaltest2022.zh-en.ref.A.en",
    "zh_en_ref_b": ZH_EN / "references/generaltest2022.zh-en.ref.B.en",
    "zh_en_hyp": ZH_EN / "system-outputs/generaltest2022.zh-en.hyp.NiuTrans.en",
}
DIMS = {"d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2, "num_heads": 2}
VOCAB_SIZE = 250_112  # mT5's (google/mt5-*, google/metricx-24-*)
REGRESSION_ID = 250_089


def real_lines(name: str, n: int, skip: int = 0) -> list[str]:
    """Lines ``skip`` .. ``skip + n`` of one of :data:`FILES`, as released (unsegmented)."""
    with open(FILES[name], encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    return lines[skip : skip + n]


def train_spm(out: Path, lines: list[str]) -> Path:
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    text = out.parent / f".{out.name}.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(out / "spiece"), vocab_size=2000,
        character_coverage=0.995, model_type="unigram", pad_id=0, eos_id=1, unk_id=2,
        bos_id=-1, minloglevel=2,
    )  # fmt: skip
    text.unlink()
    (out / "spiece.vocab").unlink()
    return out / "spiece.model"


def build(out: Path, seed: int = 1, tie: bool = False, described: bool = True) -> Path:
    """The tiny MetricX in ``out``; ``tie``: tied word embeddings (the rescaled head)."""
    import torch
    from transformers import MT5Config, MT5ForConditionalGeneration, T5TokenizerFast

    names = ("en_ja_src", "en_ja_ref", "zh_en_src", "zh_en_ref")
    spiece = train_spm(out / "tokenizer", [x for name in names for x in real_lines(name, 150)])
    tokenizer = T5TokenizerFast.from_pretrained(str(spiece.parent), extra_ids=0, legacy=True)
    config = MT5Config(
        vocab_size=VOCAB_SIZE, tie_word_embeddings=tie, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1, architectures=["MT5ForRegression"], **DIMS,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = MT5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # the decoder's one input, id 0, then adds nothing constant to the
        model.shared.weight[0] = 0  # state the score is read from: scores follow the input
    fit_head(model, tokenizer, calibration_inputs())
    model.save_pretrained(str(out), safe_serialization=True)
    if described:
        meta = {"id": "tiny/metricx-24", "revision": "r1", "metric": "metricx"}
        (out / "mtcore-model.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    return out


def calibration_inputs() -> list[str]:
    src, hyp, ref = (real_lines(f"en_ja_{k}", 150, skip=300) for k in ("src", "hyp", "ref"))
    with_ref = [
        f"source: {s} candidate: {h} reference: {r}" for s, h, r in zip(src, hyp, ref, strict=True)
    ]
    return with_ref + [f"source: {s} candidate: {h}" for s, h in zip(src, hyp, strict=True)]


def fit_head(model: Any, tokenizer: Any, texts: list[str]) -> None:
    """Sets the regression row of the head so that ``texts`` score about 12.5 +- 3."""
    import torch

    hidden = decoder_states(model, tokenizer, texts)
    scale = model.model_dim**-0.5 if model.config.tie_word_embeddings else 1.0
    hidden = hidden * scale
    generator = torch.Generator().manual_seed(0)
    targets = 12.5 + 3.0 * torch.randn(len(texts), 1, generator=generator)
    row = torch.linalg.lstsq(hidden, targets).solution[:, 0]
    head = model.get_output_embeddings()
    with torch.no_grad():
        head.weight[REGRESSION_ID] = row


def decoder_states(model: Any, tokenizer: Any, texts: list[str]) -> Any:
    """The decoder's last hidden state after one step from id 0, per text (as MetricX feeds
    it: ``</s>`` removed), in padded batches of 50."""
    import torch

    rows = []
    for start in range(0, len(texts), 50):
        ids = [x[:-1] for x in tokenizer(texts[start : start + 50])["input_ids"]]
        width = max(len(x) for x in ids)
        batch = torch.tensor([x + [0] * (width - len(x)) for x in ids])
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
        with torch.no_grad():
            out = model(
                input_ids=batch,
                attention_mask=mask,
                decoder_input_ids=torch.zeros((len(ids), 1), dtype=torch.long),
                output_hidden_states=True,
            )
        rows.append(out.decoder_hidden_states[-1][:, 0])
    return torch.cat(rows)

"""Tiny random translation models in the Hugging Face formats of OPUS-MT (Marian), M2M-100,
NLLB and mBART-50, made with transformers' own configs and tokenizer classes (no hub here): a
SentencePiece model trained on real English and Japanese lines, the vocabulary laid out as each
family's released models lay theirs out (Marian's ``<pad>`` last, M2M-100's eight made-up
words), and random weights saved as safetensors."""

from __future__ import annotations

import json
from pathlib import Path

FAMILIES = ("marian", "m2m100", "nllb", "mbart50")
DIMS = {
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
}


def train_spm(lines: list[str], out: Path) -> Path:
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    text = out / "spm.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(out / "spm"), vocab_size=1000,
        character_coverage=0.9995, model_type="unigram", minloglevel=2,
    )  # fmt: skip
    return out / "spm.model"


def build(family: str, lines: list[str], out: Path, seed: int = 1, **dims: int) -> Path:
    """A random ``family`` model (en<->ja for Marian: en->ja) saved in ``out``; ``dims``
    replace :data:`DIMS`."""
    import sentencepiece as spm
    import torch
    from transformers import (
        M2M100Config,
        M2M100ForConditionalGeneration,
        M2M100Tokenizer,
        MarianConfig,
        MarianMTModel,
        MarianTokenizer,
        MBart50Tokenizer,
        MBartConfig,
        MBartForConditionalGeneration,
        NllbTokenizer,
    )

    work = out.parent / f".{out.name}.spm"
    model_file = train_spm(lines, work)
    pieces = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(pieces.get_piece_size()):
        vocab.setdefault(pieces.id_to_piece(i), len(vocab))
    vocab_file = work / "vocab.json"
    torch.manual_seed(seed)
    if family == "marian":
        vocab["<pad>"] = len(vocab)  # OPUS-MT's conversions put <pad> last
        vocab_file.write_text(json.dumps(vocab), encoding="utf-8")
        tok = MarianTokenizer(
            str(model_file), str(model_file), str(vocab_file), source_lang="en", target_lang="ja"
        )
        pad = len(vocab) - 1
        config = MarianConfig(
            vocab_size=len(vocab), pad_token_id=pad, eos_token_id=0,
            decoder_start_token_id=pad, **(DIMS | dims),
        )  # fmt: skip
        model = MarianMTModel(config)
    elif family == "m2m100":  # fairseq's dictionary order, as M2M-100's vocab.json has it
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(pieces.get_piece_size()):
            vocab.setdefault(pieces.id_to_piece(i), len(vocab))
        vocab_file.write_text(json.dumps(vocab), encoding="utf-8")
        tok = M2M100Tokenizer(str(vocab_file), str(model_file), src_lang="en", tgt_lang="ja")
        # fairseq's M2M-100 dictionary ends in 8 made-up words (vocab_size 128112)
        size = max([*tok.get_vocab().values(), *tok.lang_token_to_id.values()]) + 1 + 8
        model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=size, **(DIMS | dims)))
    elif family == "nllb":
        tok = NllbTokenizer(str(model_file), src_lang="eng_Latn", tgt_lang="jpn_Jpan")
        size = max(tok.get_vocab().values()) + 1
        model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=size, **(DIMS | dims)))
    elif family == "mbart50":  # as facebook/mbart-large-50-many-to-many-mmt's config says
        tok = MBart50Tokenizer(str(model_file), src_lang="en_XX", tgt_lang="ja_XX")
        size = max(tok.get_vocab().values()) + 1
        # scale_embedding off: with it, a random one-layer model repeats its language token
        config = MBartConfig(
            vocab_size=size,
            normalize_before=True,
            add_final_layer_norm=True,
            scale_embedding=False,
            decoder_start_token_id=2,
            forced_eos_token_id=2,
            tokenizer_class="MBart50Tokenizer",
            **(DIMS | dims),
        )
        model = MBartForConditionalGeneration(config)
    else:
        raise ValueError(f"family {family!r} (valid: {', '.join(FAMILIES)})")
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    if family == "m2m100":  # as facebook/m2m100_418M lists them: its language tokens
        langs = list(tok.lang_token_to_id)
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            saved = json.loads((out / name).read_text(encoding="utf-8"))
            saved["additional_special_tokens"] = langs
            (out / name).write_text(json.dumps(saved, indent=2), encoding="utf-8")
    if family == "mbart50":  # the released tokenizer names its <s>; save_pretrained drops it
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            saved = json.loads((out / name).read_text(encoding="utf-8"))
            saved["bos_token"] = "<s>"
            (out / name).write_text(json.dumps(saved, indent=2), encoding="utf-8")
    return out


def greedy(model_dir: Path, lines: list[str], tgt_token: str | None, caps: list[int]) -> list[str]:
    """transformers' own greedy search of each line (one at a time, no padding), held to the
    cap the translate step gives it (``cap`` tokens before EOS, as fairseq's): the reference
    the CTranslate2 path must reproduce."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir), use_fast=False)
    model = AutoModelForSeq2SeqLM.from_pretrained(str(model_dir)).eval()
    prefix = [tok.convert_tokens_to_ids(tgt_token)] if tgt_token else []
    out = []
    for line, cap in zip(lines, caps, strict=True):
        ids = tok(line, return_tensors="pt")["input_ids"]
        start = [model.config.decoder_start_token_id, *prefix]
        with torch.no_grad():
            found = model.generate(
                ids, decoder_input_ids=torch.tensor([start]), num_beams=1, do_sample=False,
                max_new_tokens=cap + 1, min_new_tokens=1,  # + the EOS forced at the cap
                forced_eos_token_id=tok.eos_token_id,
            )  # fmt: skip
        out.append(tok.decode(found[0][len(start) :], skip_special_tokens=True).strip())
    return out

"""A pretrained M2M-100 or NLLB model (a ``models:`` entry) as the start of a fairseq training
(HW-TSC §3.3/§5.3: M2M-100 418M continued on 1.1k Liv-En pairs, Livonian tagged as Estonian).

M2M-100 and NLLB were trained with fairseq, and transformers' ``M2M100ForConditionalGeneration``
keeps fairseq's module names, dictionary order and sinusoidal positions, so the Hugging Face
weights are a fairseq ``transformer`` checkpoint again with the ``model.`` prefix dropped and the
shared embedding written under fairseq's three names; the flags of :func:`arch_args` give
fairseq the same network (pre-norm with final layer norms, shared embeddings, scaled
embeddings). fairseq's multilingual task (``translation_multi_simple_epoch`` with
``--encoder-langtok src --decoder-langtok``) feeds the source as ``__xx__ pieces </s>`` and the
target as ``__yy__ pieces </s>`` after ``</s>``; written as text (:class:`LanguageTokens`) that
is fairseq's plain translation task on the model's fixed dictionary, which is how mtcore's
``binarize`` and ``train`` steps run it, and the decoders give the target's token as the
prefix, as fairseq's ``--decoder-langtok`` and transformers' ``forced_bos_token_id`` do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtcore.api import Artifact, DataError
from mtcore_plugins.common.hub.pretrained import (
    ARTIFACT_TYPE,
    WEIGHTS,
    language_token,
    load_tokenizer,
)

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
"""fairseq's Dictionary's first four symbols (ids 0-3), which M2M-100's and NLLB's have too."""
TOKENIZER_DIR = "tokenizer"
"""Where binarized data and the models trained on it keep the pretrained model's tokenizer."""
CONTINUABLE = ("M2M100Tokenizer", "NllbTokenizer")


def check_continuable(model: Artifact, where: str) -> dict[str, Any]:
    """The config.json of a pretrained model fairseq can continue (M2M-100, NLLB)."""
    meta = model.meta
    if meta.get("type") != ARTIFACT_TYPE:
        raise DataError(f"{where} is not a pretrained model (artifact type {meta.get('type')!r})")
    if meta.get("model_type") != "m2m_100" or meta.get("tokenizer") not in CONTINUABLE:
        raise DataError(
            f"{where} is a {meta.get('model_type')} model ({meta.get('tokenizer')}); training "
            "continues M2M-100 and NLLB models (model_type m2m_100), which fairseq trained"
        )
    config = json.loads((model.path / "config.json").read_text(encoding="utf-8"))
    if config.get("pad_token_id", 1) != 1 or config.get("eos_token_id", 2) != 2:
        raise DataError(f"{where}: pad/eos ids are not fairseq's 1 and 2 (config.json)")
    activation = str(config.get("activation_function", "relu"))
    if activation not in ("relu", "gelu"):
        raise DataError(f"{where}: activation {activation!r} has no fairseq equivalent here")
    return dict(config)


def symbols(model: Artifact, size: int) -> list[str]:
    """The model's dictionary in id order, fairseq's four specials first: the tokenizer's
    vocabulary with its language tokens, and the ids the embedding has beyond them named as
    fairseq names its padding (``madeupword0000``...: M2M-100's last eight rows)."""
    tok = load_tokenizer(model.path)
    found: dict[int, str] = {}
    for symbol, index in tok.get_vocab().items():
        found.setdefault(int(index), str(symbol))
    where = f"pretrained model {model.path}"
    if tuple(found.get(i) for i in range(4)) != SPECIALS:
        raise DataError(f"{where}: ids 0-3 are not fairseq's {', '.join(SPECIALS)}")
    if max(found) >= size:
        raise DataError(f"{where}: the tokenizer has id {max(found)}, the model {size} rows")
    out, made_up = [], 0
    for index in range(size):
        if index in found:
            out.append(found[index])
        else:
            out.append(f"madeupword{made_up:04d}")
            made_up += 1
    if len(set(out)) != len(out):
        raise DataError(f"{where}: the vocabulary names a symbol twice")
    return out


def write_dictionary(model: Artifact, path: Path) -> int:
    """The model's vocabulary as a fairseq ``dict.txt`` (the specials fairseq adds itself left
    out; counts are not used once a dictionary is fixed). Returns its size with them."""
    config = check_continuable(model, f"pretrained model {model.path}")
    names = symbols(model, int(config["vocab_size"]))
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for symbol in names[len(SPECIALS) :]:
            if any(c.isspace() for c in symbol):
                raise DataError(f"pretrained model {model.path}: symbol {symbol!r} has a space")
            out.write(f"{symbol} 1\n")
    return len(names)


def borrow_rare_rows(
    dictionary: Path, texts: Sequence[Path], reserved: frozenset[str]
) -> tuple[int, list[tuple[str, str]]]:
    """HW-TSC §3.3: "For unknown tokens in Liv, we replace them with very low-frequent words in
    the vocabulary." The pieces of ``texts`` (one example a line, pieces split by spaces) that
    the fixed ``dictionary`` lacks take over the rows of its rarest entries (fairseq's
    dictionaries are sorted by frequency, so the last ones), the most frequent piece the rarest
    row; an entry the texts use, a language token or another ``reserved`` symbol is never
    taken. Rewrites ``dictionary``; returns the number of unknown pieces and the (piece,
    replaced entry) pairs."""
    from collections import Counter

    entries = [line.rsplit(" ", 1) for line in dictionary.read_text(encoding="utf-8").splitlines()]
    known = {symbol for symbol, _ in entries}
    used: Counter[str] = Counter()
    for path in texts:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                used.update(line.split())
    unknown = sorted((p for p in used if p not in known), key=lambda p: (-used[p], p))
    spare = [
        i for i in range(len(entries) - 1, -1, -1)
        if entries[i][0] not in used and entries[i][0] not in reserved
        and not entries[i][0].startswith("madeupword")
    ]  # fmt: skip
    pairs = []
    for piece, index in zip(unknown, spare, strict=False):
        pairs.append((piece, entries[index][0]))
        entries[index][0] = piece
    with open(dictionary, "w", encoding="utf-8", newline="\n") as out:
        out.writelines(f"{symbol} {count}\n" for symbol, count in entries)
    return len(unknown), pairs


def arch_args(config: dict[str, Any]) -> list[str]:
    """fairseq ``transformer`` flags that build the network of an M2M-100/NLLB config.json."""
    args = ["--arch", "transformer", "--share-all-embeddings"]
    args += ["--encoder-normalize-before", "--decoder-normalize-before"]
    dims = {
        "--encoder-embed-dim": config["d_model"],
        "--decoder-embed-dim": config["d_model"],
        "--encoder-ffn-embed-dim": config["encoder_ffn_dim"],
        "--decoder-ffn-embed-dim": config["decoder_ffn_dim"],
        "--encoder-layers": config["encoder_layers"],
        "--decoder-layers": config["decoder_layers"],
        "--encoder-attention-heads": config["encoder_attention_heads"],
        "--decoder-attention-heads": config["decoder_attention_heads"],
        "--max-source-positions": config["max_position_embeddings"],
        "--max-target-positions": config["max_position_embeddings"],
        "--activation-fn": config.get("activation_function", "relu"),
    }
    args += [item for flag, value in dims.items() for item in (flag, str(value))]
    if not config.get("scale_embedding", True):
        args.append("--no-scale-embedding")
    return args


def fairseq_checkpoint(model: Artifact, out: Path) -> None:
    """The model's weights as a checkpoint ``fairseq-train --finetune-from-model`` loads
    (weights only: optimizer, schedule and data iterator start afresh)."""
    import torch
    from safetensors.torch import load_file

    config = check_continuable(model, f"pretrained model {model.path}")
    weights = load_file(str(model.path / WEIGHTS))
    shared = weights.get("model.shared.weight")
    if shared is None:
        shared = weights.get("model.encoder.embed_tokens.weight")
    if shared is None:
        raise DataError(f"{model.path / WEIGHTS}: no model.shared.weight (the embeddings)")
    if shared.shape[0] != int(config["vocab_size"]):
        raise DataError(
            f"{model.path / WEIGHTS}: {shared.shape[0]} embedding rows, config.json says "
            f"vocab_size {config['vocab_size']}"
        )
    state: dict[str, Any] = {}
    for name, tensor in weights.items():
        if not name.startswith(("model.encoder.", "model.decoder.")):
            continue  # model.shared and lm_head: the tied embedding, written below
        key = name.removeprefix("model.")
        if key.endswith("embed_positions.weights") or key.endswith("embed_tokens.weight"):
            continue  # sinusoids fairseq computes itself; the shared embedding
        state[key] = tensor.float().contiguous()
    table = shared.float().contiguous()
    for key in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                "decoder.output_projection.weight"):  # fmt: skip
        state[key] = table
    for side in ("encoder", "decoder"):
        state[f"{side}.embed_positions._float_tensor"] = torch.FloatTensor(1)
        state[f"{side}.version"] = torch.Tensor([3])
    checkpoint = {
        "cfg": None,
        "model": state,
        "optimizer_history": [
            {
                "criterion_name": "LabelSmoothedCrossEntropyCriterion",
                "optimizer_name": "Adam",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],  # fmt: skip
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
        "last_optimizer_state": None,
    }
    partial = out.with_name(out.name + ".partial")
    torch.save(checkpoint, partial)
    partial.replace(out)


@dataclass
class LanguageTokens:
    """Text as the pieces a continued M2M-100/NLLB model reads: the model's SentencePiece
    segmentation (special-token strings in the text stay text), the source's language token
    first; the target's language token is the decoders' prefix. No EOS: the converted fairseq
    model adds it (CTranslate2's ``add_source_eos``), as fairseq's binarizer does."""

    tokenizer: Any
    source: str
    prefix: list[str]
    specials: frozenset[str]

    @classmethod
    def load(cls, folder: Path, meta: dict[str, Any]) -> LanguageTokens:
        """The tokens of a fairseq data or model artifact made from a pretrained tokenizer."""
        tokens = meta.get("language_tokens") or {}
        tok = load_tokenizer(folder / TOKENIZER_DIR)
        specials = frozenset(str(t) for t in tok.all_special_tokens)
        return cls(tok, str(tokens["src"]), [str(tokens["tgt"])], specials)

    def pieces(self, lines: Sequence[str]) -> list[list[str]]:
        """The SentencePiece pieces of each line, without language token or EOS."""
        model = getattr(self.tokenizer, "sp_model", None)
        if model is not None:
            return [list(model.encode(line, out_type=str)) for line in lines]
        return [list(self.tokenizer.tokenize(line)) for line in lines]

    def encode(self, lines: list[str]) -> list[list[str]]:
        """Empty lines give no tokens (the decoders give them an empty output)."""
        return [[self.source, *p] if p else [] for p in self.pieces(lines)]

    def decode(self, tokens: list[str]) -> str:
        """The pieces joined, ``▁`` a space (SentencePiece's decoding, which would make an
        unknown piece, one :func:`borrow_rare_rows` gave a row, `` ⁇ ``)."""
        kept = [t for t in tokens if t not in self.specials]
        return " ".join("".join(kept).replace("\u2581", " ").split())


def language_tokens(
    model: Artifact, src: str, tgt: str, src_token: str | None, tgt_token: str | None, where: str
) -> dict[str, str]:
    """The tokens that name src and tgt to the model (HW-TSC's Liv: ``src_token: __et__``)."""
    check_continuable(model, where)
    return {
        "src": language_token(model.meta, src, where, src_token),
        "tgt": language_token(model.meta, tgt, where, tgt_token),
    }


def copy_tokenizer(model: Artifact, out: Path) -> None:
    """The pretrained model's tokenizer files (not its weights) into ``out``/tokenizer."""
    import shutil

    target = out / TOKENIZER_DIR
    target.mkdir(parents=True, exist_ok=True)
    for name in model.files():
        if name != WEIGHTS:
            shutil.copyfile(model.member(name), target / name)

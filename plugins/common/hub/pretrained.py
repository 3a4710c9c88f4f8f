"""Pretrained translation models from Hugging Face repositories (OPUS-MT's Marian models,
M2M-100, NLLB), as the ``fetch_model`` step writes them and the decoders read them.

What is read is data, never code: a repository's ``config.json`` must name an architecture
transformers itself implements (:data:`ARCHITECTURES`; an ``auto_map``, which makes
transformers import the repository's own Python, is refused), its tokenizer one of
transformers' own classes, and its weights come as safetensors (a ``pytorch_model.bin`` is
read with ``torch.load(weights_only=True)`` and written out as safetensors once, at fetch).
Tokenizers are loaded with ``local_files_only`` and ``trust_remote_code=False``; nothing is
downloaded behind the step's back.

Decoding converts the model once with CTranslate2's own Transformers converter (cached by the
files' hashes, as :mod:`~mtcore_plugins.common.ct2.convert` caches fairseq checkpoints) and
tokenizes with the model's tokenizer: the source's language token and EOS as transformers writes
them, the target language as CTranslate2's ``target_prefix`` (M2M-100 ``__ja__``, NLLB ``jpn_Jpan``,
mBART-50 ``ja_XX``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtcore.api import Artifact, DataError, content_hash
from mtcore.api.engine import conversions_home, hash_json
from mtcore_plugins.common.ct2.convert import install
from mtcore_plugins.common.text import langcodes

ARTIFACT_TYPE = "pretrained-model"
WEIGHTS = "model.safetensors"
PICKLED_WEIGHTS = "pytorch_model.bin"
CONVERTER_VERSION = 1  # bump when the conversion below changes: old cache entries go unused

TOKENIZER_FILES: dict[str, tuple[str, ...]] = {
    # tokenizer class (tokenizer_config.json) -> the files it reads, beside config.json,
    # tokenizer_config.json and the weights
    "MarianTokenizer": ("source.spm", "target.spm", "vocab.json"),
    "M2M100Tokenizer": ("vocab.json", "sentencepiece.bpe.model", "special_tokens_map.json"),
    "NllbTokenizer": ("sentencepiece.bpe.model", "special_tokens_map.json"),
    "MBart50Tokenizer": ("sentencepiece.bpe.model", "special_tokens_map.json"),
    # masked LMs (rerank features, NT5 §5.1)
    "BertTokenizer": ("vocab.txt",),
    "RobertaTokenizer": ("vocab.json", "merges.txt"),
    "DebertaV2Tokenizer": ("spm.model",),
    "XLMRobertaTokenizer": ("sentencepiece.bpe.model",),
}
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    # config.json model_type -> the tokenizer classes its models come with
    "marian": ("MarianTokenizer",),
    "m2m_100": ("M2M100Tokenizer", "NllbTokenizer"),
    "mbart": ("MBart50Tokenizer",),  # mBART-50; mBART-25 starts decoding at its language code
    "bert": ("BertTokenizer",),
    "roberta": ("RobertaTokenizer", "XLMRobertaTokenizer", "DebertaV2Tokenizer"),
    "deberta-v2": ("DebertaV2Tokenizer",),
    "xlm-roberta": ("XLMRobertaTokenizer",),
}
DEFAULT_TOKENIZER = {
    "marian": "MarianTokenizer", "m2m_100": "M2M100Tokenizer", "mbart": "MBart50Tokenizer",
    "bert": "BertTokenizer",
    "roberta": "RobertaTokenizer", "deberta-v2": "DebertaV2Tokenizer",
    "xlm-roberta": "XLMRobertaTokenizer",
}  # fmt: skip
MULTILINGUAL = ("M2M100Tokenizer", "NllbTokenizer", "MBart50Tokenizer")
"""Tokenizers of models that take the target language as a token (CTranslate2's prefix)."""
MASKED_LMS = ("bert", "roberta", "deberta-v2", "xlm-roberta")
"""Model types fetched as masked language models (the ``masked_lm`` rerank feature)."""


def task_of(model_type: str) -> str:
    """``translation`` or ``masked_lm``: what a model of this type is fetched for."""
    return "masked_lm" if model_type in MASKED_LMS else "translation"


def check_config(config: Any, where: str) -> str:
    """The model type of a repository's ``config.json`` (parsed), refused when transformers
    would run the repository's own code for it or mtcore cannot decode it."""
    if not isinstance(config, dict):
        raise DataError(f"{where}: config.json is not a JSON object")
    if "auto_map" in config:
        raise DataError(
            f"{where}: config.json has an auto_map (the repository's own Python code); mtcore "
            "never runs a model's code (trust_remote_code is never set)"
        )
    model_type = str(config.get("model_type", ""))
    if model_type not in ARCHITECTURES:
        raise DataError(
            f"{where}: model_type {model_type!r} is not one mtcore reads (valid: "
            f"{', '.join(ARCHITECTURES)}: OPUS-MT's Marian models, M2M-100, NLLB and mBART-50 to "
            "translate; BERT, RoBERTa, DeBERTa-v2 and XLM-R masked LMs to score)"
        )
    return model_type


def tokenizer_class(model_type: str, tokenizer_config: Any, where: str) -> str:
    """The tokenizer class ``tokenizer_config.json`` names (``Fast`` stripped: the
    SentencePiece one is used), checked against the model type."""
    named = tokenizer_config.get("tokenizer_class") if isinstance(tokenizer_config, dict) else None
    if isinstance(tokenizer_config, dict) and "auto_map" in tokenizer_config:
        raise DataError(f"{where}: tokenizer_config.json has an auto_map (the repository's code)")
    name = str(named or DEFAULT_TOKENIZER[model_type]).removesuffix("Fast")
    if name not in ARCHITECTURES[model_type]:
        raise DataError(
            f"{where}: tokenizer class {name!r} is not one of a {model_type} model "
            f"(valid: {', '.join(ARCHITECTURES[model_type])})"
        )
    return name


def model_files(tokenizer: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """Every file a model with this tokenizer needs (and ``extra`` ones), the weights last."""
    files = ("config.json", "tokenizer_config.json", *TOKENIZER_FILES[tokenizer], *extra)
    return (*dict.fromkeys(files), WEIGHTS)


def safetensors_from_pickle(pickled: Path, out: Path) -> None:
    """A ``pytorch_model.bin`` state dict as safetensors, read with the safe loader (tensors
    and plain containers only: a pickle that would build any other object is refused)."""
    import pickle

    import torch
    from safetensors.torch import save_file

    try:
        state = torch.load(pickled, map_location="cpu", weights_only=True, mmap=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError) as exc:
        raise DataError(
            f"{pickled}: not a plain state dict of tensors (read with weights_only=True): "
            f"{str(exc).splitlines()[0][:300]}"
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise DataError(f"{pickled}: not a state dict mapping names to tensors")
    # safetensors refuses tensors that share memory (tied embeddings): each is written whole
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(out))


def languages(path: Path, tokenizer: str) -> list[str]:
    """The language codes the model's tokenizer has tokens for (M2M-100 ``en``, NLLB
    ``eng_Latn``); a Marian model's source and target (its tokenizer_config), when given."""
    if tokenizer == "MarianTokenizer":
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        return [str(config[k]) for k in ("source_lang", "target_lang") if config.get(k)]
    if tokenizer not in MULTILINGUAL:
        return []  # a masked LM: any language its vocabulary covers
    tok = load_tokenizer(path)
    if tokenizer == "M2M100Tokenizer":
        return list(tok.lang_code_to_token)
    if tokenizer == "MBart50Tokenizer":
        return list(tok.lang_code_to_id)
    return [str(t) for t in tok.additional_special_tokens]


def load_tokenizer(path: Path) -> Any:
    """The model's SentencePiece tokenizer, from its files only."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        str(path), use_fast=False, local_files_only=True, trust_remote_code=False
    )


def check_pretrained(
    where: str, meta: dict[str, Any], src: str, tgt: str,
    src_token: str | None = None, tgt_token: str | None = None,
) -> None:  # fmt: skip
    """A pretrained model's artifact translates src->tgt: a multilingual one has tokens for
    both languages (or the ``src_token`` / ``tgt_token`` given for them: HW-TSC's Liv as
    Estonian), a Marian one names them (when its tokenizer_config does)."""
    if meta.get("type") != ARTIFACT_TYPE:
        raise DataError(f"{where} is not a pretrained model (artifact type {meta.get('type')!r})")
    if meta.get("task", "translation") != "translation":
        raise DataError(f"{where} is a {meta.get('model_type')} {meta.get('task')} model, not one "
                        "that translates")  # fmt: skip
    language_token(meta, src, where, src_token)
    language_token(meta, tgt, where, tgt_token)
    known = [str(code) for code in meta.get("languages", [])]
    if meta.get("tokenizer") == "MarianTokenizer" and len(known) == 2:
        source, target = ({langcodes.primary(k)} for k in known)
        if not (langcodes.resolve(src, source) and langcodes.resolve(tgt, target)):
            raise DataError(
                f"{where}: this Marian model translates {known[0]}->{known[1]}, not {src}->{tgt}"
            )


def language_token(meta: dict[str, Any], lang: str, where: str, given: str | None = None) -> str:
    """The token that names ``lang`` to the model: M2M-100's ``__ja__``, NLLB's ``jpn_Jpan``,
    mBART-50's ``ja_XX`` (the first of the language's scripts the model has: ``zho_Hans`` for
    zh; name another with the step's ``src_token`` / ``tgt_token``); "" for a Marian model,
    which has none."""
    tokenizer = str(meta.get("tokenizer"))
    known = [str(code) for code in meta.get("languages", [])]
    if tokenizer == "MarianTokenizer":
        if known and langcodes.resolve(lang, {langcodes.primary(k) for k in known}) == "":
            raise DataError(
                f"{where}: this Marian model translates {'->'.join(known)}; it has no {lang!r}"
            )
        return ""
    if given is not None:
        code = given.strip("_") if tokenizer == "M2M100Tokenizer" else given
        if code not in known:
            raise DataError(f"{where}: {given!r} is not one of the model's {len(known)} languages")
    else:
        label = langcodes.resolve(lang, {langcodes.primary(k) for k in known})
        matches = [k for k in known if langcodes.primary(k) == label] if label else []
        if not matches:
            sample = ", ".join(known[:8])
            raise DataError(
                f"{where}: the model has no language token for {lang!r} (it has {len(known)}: "
                f"{sample}, ...); name one with src_token / tgt_token"
            )
        code = matches[0]
    return f"__{code}__" if tokenizer == "M2M100Tokenizer" else code


@dataclass
class PretrainedTokens:
    """Source lines to the tokens CTranslate2 reads (language token and EOS included, as the
    model's tokenizer writes them), and target tokens back to text."""

    tokenizer: Any
    prefix: list[str]
    eos_included: bool = True

    @classmethod
    def load(
        cls,
        model: Artifact,
        src: str,
        tgt: str,
        src_token: str | None = None,
        tgt_token: str | None = None,
    ) -> PretrainedTokens:
        where = f"model {model.path}"
        tok = load_tokenizer(model.path)
        source = language_token(model.meta, src, where, src_token)
        target = language_token(model.meta, tgt, where, tgt_token)
        if source:
            m2m = model.meta["tokenizer"] == "M2M100Tokenizer"
            tok.src_lang = source.strip("_") if m2m else source
        return cls(tok, [target] if target else [])

    def encode(self, lines: list[str]) -> list[list[str]]:
        """Empty lines give no tokens (the decoders give them an empty output)."""
        tok = self.tokenizer
        return [
            list(tok.convert_ids_to_tokens(tok(line)["input_ids"])) if line.strip() else []
            for line in lines
        ]

    def encode_target(self, lines: list[str]) -> list[list[str]]:
        """Target-side tokens of ``lines`` (a Marian model's target SentencePiece model), with
        no language token or EOS: what force decoding scores after the prefix."""
        tok = self.tokenizer
        return [
            list(tok.convert_ids_to_tokens(
                tok(text_target=line, add_special_tokens=False)["input_ids"]
            ))
            for line in lines
        ]  # fmt: skip

    def decode(self, tokens: list[str]) -> str:
        tok = self.tokenizer
        ids = tok.convert_tokens_to_ids(list(tokens))
        return str(tok.decode(ids, skip_special_tokens=True)).strip()


def cache_key(model: Artifact) -> str:
    """The conversion's key: the sha256 of every file in the model's folder, read here (issue
    70: the hashes its ``artifact.json`` claimed let a crafted system install its weights
    under a real model's key in the user's cache)."""
    import ctranslate2

    files = {}
    for path in sorted(model.path.rglob("*")):
        if path.is_symlink():
            raise DataError(f"{path}: a symbolic link in a pretrained model's folder")
        if path.is_file():
            files[path.relative_to(model.path).as_posix()] = content_hash(path)
    return hash_json(
        {
            "files": files,
            "converter": CONVERTER_VERSION,
            "ctranslate2": ctranslate2.__version__,
            "kind": "transformers",
        }
    )[:32]


def converted_pretrained(model: Artifact) -> Path:
    """The CTranslate2 model of a pretrained model's artifact, converted once by CTranslate2's
    Transformers converter and cached by the files' hashes (float32; the compute type is
    chosen when it is loaded)."""
    from ctranslate2.converters import TransformersConverter

    target = conversions_home() / cache_key(model)
    if (target / "model.bin").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.{os.getpid()}.tmp"
    try:
        TransformersConverter(str(model.path), trust_remote_code=False).convert(
            str(partial), force=True
        )
    except (ValueError, NotImplementedError, KeyError) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise DataError(f"{model.path}: CTranslate2 cannot convert this model: {exc}") from exc
    positions = model.meta.get("max_positions")
    return install(partial, target, [positions, positions])

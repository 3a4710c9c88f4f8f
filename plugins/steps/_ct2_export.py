"""A translate step's model written as a CTranslate2 directory (``mtcore export --format
ctranslate2``): what CTranslate2's own ``Translator`` loads, quantized at export, with the
tokenizer files beside it and ``mtcore_export.json`` saying how to use them.

A fairseq model trained by a recipe is converted by :mod:`~mtcore_plugins.common.ct2.convert` (its
SentencePiece model copied as ``spm.model``; sources are its pieces, without EOS); a pretrained
Hugging Face model (``models:``) by CTranslate2's Transformers converter (its tokenizer files copied
as the repository has them). ``decode`` translates with the written model or with the same model
converted unquantized, through CTranslate2's own ``Translator.translate_batch`` with the settings
``mtcore_export.json`` states (``client``), so the export measures what its users get: against
the run's output and against the unquantized model (CTranslate2 #1273, #847: int8 losses nobody
measured).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from mtcore.api import Artifact, DataError
from mtcore.api.engine import ModelExport
from mtcore_plugins.common.ct2.convert import (
    LIMITS_FILE,
    FairseqSpecConverter,
    converted,
    limits,
)
from mtcore_plugins.common.decoding.translator import MODEL_ROLES
from mtcore_plugins.common.hub.pretrained import (
    ARTIFACT_TYPE,
    WEIGHTS,
    PretrainedTokens,
    converted_pretrained,
)
from mtcore_plugins.common.text.spm import load_spm
from mtcore_plugins.steps._ct2_decoding import SpmTokens, obstacles

QUANTIZATIONS = (
    "float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
    "bfloat16",
)  # fmt: skip
"""CTranslate2's quantization types (``ct2-*-converter --quantization``)."""


CLIENT_NOTES = {
    "max_decoding_length": "per sentence: floor(max_len_a * (source pieces + 1) + "
    "max_len_b) (+ 0 where the tokenizer appends its own EOS), at most positions.target - 2, "
    "plus the target_prefix's length; "
    "sentences with the same cap in one call",
    "source": "pieces of a non-empty line, the first positions.source - 1 kept; an "
    "empty line translates to an empty line",
    "differs": "fairseq's no_repeat_ngram_size takes blocked tokens out after its "
    "log-softmax; CTranslate2 masks them before its softmax, so the other tokens' "
    "probabilities rise and beam search ranks hypotheses differently (greedy search "
    "agrees). A capped output gets no EOS score in CTranslate2.",
}
"""How a user runs ``client.translate_batch`` (``mtcore_export.json``), and where it differs."""


def export_ctranslate2(
    config: Any, step_id: str, inputs: dict[str, Artifact], out: Path, quantization: str,
    registry: Any,
) -> ModelExport:  # fmt: skip
    """Writes the model of a translate step's ``inputs`` into the new directory ``out``."""
    import json

    import ctranslate2

    if quantization not in QUANTIZATIONS:
        raise DataError(f"quantization {quantization!r} (valid: {', '.join(QUANTIZATIONS)})")
    members = {r: a for r, a in inputs.items() if r in MODEL_ROLES}
    model = members["model"]
    out.mkdir(parents=True, exist_ok=False)
    tokens: Any = None  # PretrainedTokens, LanguageTokens, or None for the step's spm
    if model.meta.get("type") == ARTIFACT_TYPE:
        from ctranslate2.converters import TransformersConverter

        unquantized = converted_pretrained(model)
        TransformersConverter(str(model.path), trust_remote_code=False).convert(
            str(out), quantization=quantization, force=True
        )
        (out / LIMITS_FILE).write_text((unquantized / LIMITS_FILE).read_text())
        files = [n for n in model.meta.get("files", {}) if n not in ("config.json", WEIGHTS)]
        for name in files:
            shutil.copyfile(model.member(name), out / name)
        tokens = PretrainedTokens.load(model, config.src, config.tgt, config.src_token,
                                       config.tgt_token)  # fmt: skip
        tokenizer = {"kind": "transformers", "class": model.meta.get("tokenizer"),
                     "files": files, "model": model.meta.get("id")}  # fmt: skip
    else:
        reasons = obstacles(config, members, registry)
        if reasons:
            raise DataError(f"{step_id}: CTranslate2 cannot run this model: {'; '.join(reasons)}")
        unquantized = converted(model, config.src, config.tgt, config.models, registry)
        converter = FairseqSpecConverter(model, config.src, config.tgt, config.models, registry)
        converter.convert(str(out), quantization=quantization, force=True)
        (out / LIMITS_FILE).write_text(json.dumps(converter.limits) + "\n")
        if "language_tokens" in model.meta:  # continued from a pretrained M2M-100/NLLB
            from mtcore_plugins.steps._pretrained_init import TOKENIZER_DIR, LanguageTokens

            tags = LanguageTokens.load(model.path, model.meta)
            files = sorted(  # CTranslate2's own config.json stays
                p.name for p in (model.path / TOKENIZER_DIR).iterdir() if p.name != "config.json"
            )
            for name in files:
                shutil.copyfile(model.path / TOKENIZER_DIR / name, out / name)
            tokens = tags
            tokenizer = {"kind": "transformers", "class": type(tags.tokenizer).__name__,
                         "files": files, "model": (model.meta.get("pretrained") or {}).get("id"),
                         "source": f"{tags.source} followed by the SentencePiece pieces of "
                         "the tokenizer's sp_model (no EOS: the model adds it)"}  # fmt: skip
        else:
            spm = inputs["spm"]
            shutil.copyfile(spm.file("model", "spm.model"), out / "spm.model")
            tokenizer = {"kind": "sentencepiece", "files": ["spm.model"],
                         "eos": "added by the model: give the pieces alone"}  # fmt: skip
    settings = client_settings(config, tokens.prefix if tokens is not None else [])
    encoder = tokens if tokens is not None else SpmTokens(load_spm(inputs["spm"].path))
    source, target = limits(out)

    reverse = str(model.meta.get("direction", "l2r")) == "r2l"
    decode = _decoder(out, unquantized, encoder, settings, (source, target), reverse)
    info = {
        "format": "ctranslate2",
        "ctranslate2": ctranslate2.__version__,
        "quantization": quantization,
        "src": config.src,
        "tgt": config.tgt,
        "direction": str(model.meta.get("direction", "l2r")),
        "tokenizer": tokenizer,
        "positions": {"source": source, "target": target},
        "search": search_settings(config, tokens.prefix if tokens is not None else []),
        "client": {"translate_batch": settings, **CLIENT_NOTES},
    }
    return ModelExport(config.src, config.tgt, info, decode)


def _decoder(
    out: Path, unquantized: Path, encoder: Any, settings: dict[str, Any],
    positions: tuple[int | None, int | None], reverse: bool,
) -> Any:  # fmt: skip
    """ModelExport's ``decode``: the written model as saved (CTranslate2 runs int8 as int8,
    float16 on a CPU as float32 of the float16 weights), or the unquantized one in float32."""
    import ctranslate2

    def decode(lines: list[str], exported: bool) -> list[str]:
        translator = ctranslate2.Translator(
            str(out if exported else unquantized),
            compute_type="default" if exported else "float32",
            intra_threads=os.cpu_count() or 1,
        )
        return client_translate(translator, encoder, settings, lines, positions, reverse)

    return decode


def client_settings(config: Any, prefix: list[str]) -> dict[str, Any]:
    """``Translator.translate_batch`` settings that come closest to the translate step's
    search (beam search; what the step's sampling draws is not reproducible)."""
    return {
        "beam_size": config.beam,
        "length_penalty": config.lenpen,
        "no_repeat_ngram_size": config.no_repeat_ngram_size,
        "min_decoding_length": 1 + len(prefix),  # fairseq's min_len: no empty output
        "max_input_length": 0,  # truncated before, as fairseq truncates
        "num_hypotheses": 1,
        "max_len_a": config.max_len_a,  # for max_decoding_length, not translate_batch's own
        "max_len_b": config.max_len_b,
        "target_prefix": prefix,
    }


def client_translate(
    translator: Any, tokens: Any, settings: dict[str, Any], lines: list[str],
    positions: tuple[int | None, int | None], reverse: bool,
) -> list[str]:  # fmt: skip
    """``lines`` translated by ``translator.translate_batch`` as ``mtcore_export.json``'s
    ``client`` entry says a user should: what the export's checks measure."""
    options = dict(settings)
    a, b, prefix = options.pop("max_len_a"), options.pop("max_len_b"), options.pop("target_prefix")
    max_source, max_target = positions
    pieces = [list(p) for p in tokens.encode(lines)]
    eos = 0 if getattr(tokens, "eos_included", False) else 1  # a pretrained tokenizer's own
    by_cap: dict[int, list[int]] = {}
    for index, source in enumerate(pieces):
        if not source:
            continue
        if max_source is not None and len(source) + eos > max_source:
            cut = source[: max_source - 1]
            pieces[index] = source = cut if eos else [*cut, source[-1]]  # its EOS stays last
        cap = math.floor((len(source) + eos) * a + b)
        if max_target is not None:
            cap = min(cap, max_target - 2)
        by_cap.setdefault(max(cap, 1), []).append(index)
    out = [""] * len(lines)
    for cap, rows in sorted(by_cap.items()):
        found = translator.translate_batch(
            [pieces[i] for i in rows],
            target_prefix=[prefix] * len(rows) if prefix else None,
            max_decoding_length=cap + len(prefix),
            **options,
        )
        for index, result in zip(rows, found, strict=True):
            hyp = result.hypotheses[0][len(prefix) :]
            out[index] = str(tokens.decode(hyp[::-1] if reverse else hyp))
    return out


def search_settings(config: Any, prefix: list[str]) -> dict[str, Any]:
    """The translate step's search as an export's ``mtcore_export.json`` states it."""
    return {
        "beam_size": config.beam,
        "length_penalty": config.lenpen,
        "max_len_a": config.max_len_a,
        "max_len_b": config.max_len_b,
        "no_repeat_ngram_size": config.no_repeat_ngram_size,
        "target_prefix": prefix,
    }

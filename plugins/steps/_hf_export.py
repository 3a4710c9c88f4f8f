"""A translate step's model written as a transformers directory (``mtcore export --format
huggingface``): what ``AutoModelForSeq2SeqLM.from_pretrained(DIR)`` loads with transformers' own
classes (no ``trust_remote_code``), safetensors weights saved in float32, float16 or bfloat16, a
``generation_config.json`` holding the step's search, the tokenizer files beside them and
``mtcore_export.json`` saying how to make input ids.

A fairseq model trained by a recipe maps onto one of transformers' two ports of fairseq's
Transformer, chosen by where its layer norms sit:

- post-norm (fairseq's ``transformer``: ``normalize_before`` off on both sides) →
  ``FSMTForConditionalGeneration``, which ties the decoder's input and output embeddings (and,
  with ``share_all_embeddings``, the encoder's too);
- pre-norm (on on both sides, with fairseq's final layer norms) →
  ``M2M100ForConditionalGeneration``, which shares one embedding between encoder, decoder and
  output (``share_all_embeddings``).

Both keep fairseq's parameter names, dictionary ids (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2,
``<unk>`` 3), embedding scale and sinusoidal positions (from ``padding_idx + 1``, fairseq's
frequencies), so the weights are renamed, not converted. Marian is no target: its sinusoids
have other frequencies and start at 0. What neither expresses is refused by name before any
weight is read, as is a parameter with no place after the renaming; and the written directory,
loaded back, must give fairseq's log-probabilities on a probe within ``PROBE_TOLERANCE``, or
nothing is written (:mod:`~mtcore_plugins.steps._hf_fairseq`).

transformers has no tokenizer class for "SentencePiece pieces looked up in a fairseq
dictionary", so the directory holds ``spm.model`` and the dictionaries as
``source_vocab.json`` / ``target_vocab.json`` (piece -> id), and ``mtcore_export.json``'s
``tokenizer`` says how fairseq makes input ids of them: the pieces' ids, then EOS.

A pretrained model of the recipe's ``models:`` is a transformers model already: its weights are
written again (in the asked dtype) with its config and tokenizer files, and a generation config
that forces the target language's token (M2M-100, NLLB, mBART-50).

``decode`` translates with ``generate`` on the written directory (the step's beam, length
penalty and ``a * source + b`` cap, EOS forced there as fairseq forces it) or, unexported, with
the step's own CTranslate2 decoding in float32, so that the export's BLEU check compares them.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtcore.api import Artifact, DataError
from mtcore.api.engine import ModelExport
from mtcore_plugins.common.ct2.convert import (
    checkpoint_args,
    checkpoint_path,
    converted,
    model_name,
)
from mtcore_plugins.common.decoding.translator import MODEL_ROLES, DecodeJob
from mtcore_plugins.common.hub.pretrained import (
    ARTIFACT_TYPE,
    WEIGHTS,
    PretrainedTokens,
    converted_pretrained,
)
from mtcore_plugins.steps._ct2_decoding import Ct2Translator
from mtcore_plugins.steps._ct2_export import search_settings
from mtcore_plugins.steps._hf_fairseq import (
    EOS,
    IDS,
    PROBE_TOLERANCE,
    UNK,
    load_fairseq,
    probe,
    transformers_model,
    unsupported,
)

DTYPES = ("float32", "float16", "bfloat16")
"""The weights' saved type (``--quantization``); transformers has no int8 format of its own."""
VOCABS = ("source_vocab.json", "target_vocab.json")


@dataclass
class Side:
    """How the written directory's model is fed and read: source lines to input ids (EOS
    included; none for an empty line), output ids (after the decoder start and target prefix,
    before EOS) to text, the target prefix and the model's positions."""

    encode: Callable[[list[str]], list[list[int]]]
    text: Callable[[list[int]], str]
    prefix: list[int]
    positions: tuple[int | None, int | None]


def export_huggingface(
    config: Any,
    step_id: str,
    inputs: dict[str, Artifact],
    out: Path,
    quantization: str,
    registry: Any,
) -> ModelExport:
    """Writes the model of a translate step's ``inputs`` into the new directory ``out``."""
    import transformers

    if quantization not in DTYPES:
        raise DataError(
            f"quantization {quantization!r}: the huggingface format saves float32, float16 or "
            "bfloat16 weights (int8 is CTranslate2's: --format ctranslate2)"
        )
    members = {r: a for r, a in inputs.items() if r in MODEL_ROLES}
    if len(members) > 1:
        raise DataError(
            f"{step_id}: transformers cannot express this model: an ensemble of "
            f"{len(members)} models (a transformers model is one network)"
        )
    if not config.sampling and config.temperature != 1.0:
        raise DataError(
            f"{step_id}: temperature {config.temperature} under beam search "
            "(transformers' generate applies it to sampling only)"
        )
    model = members["model"]
    search = config.model_copy(update={"sampling": False, "nbest": 0})
    job = DecodeJob(step_id, inputs)
    if model.meta.get("type") == ARTIFACT_TYPE:
        side, written = write_pretrained(search, model, out, quantization)
        tokens = PretrainedTokens.load(
            model, config.src, config.tgt, config.src_token, config.tgt_token
        )
        reference = Ct2Translator(
            search.model_copy(update={"compute_type": "float32"}),
            job,
            converted_pretrained(model),
            0,
            tokens,
        )
    else:
        side, written = write_fairseq(search, step_id, inputs, out, quantization, registry)
        unquantized = converted(model, config.src, config.tgt, config.models, registry)
        reference = Ct2Translator(
            search.model_copy(update={"compute_type": "float32"}), job, unquantized, 0
        )

    def decode(lines: list[str], exported: bool) -> list[str]:
        # the written directory through generate (float32 of the saved weights on a CPU, as
        # CTranslate2 runs float16 there); the step's own CTranslate2 decoding in float32
        return generate(out, search, side, lines) if exported else reference.translate(lines)

    info = {
        "format": "huggingface",
        "transformers": transformers.__version__,
        **written,
        "quantization": quantization,
        "src": config.src,
        "tgt": config.tgt,
        "direction": str(model.meta.get("direction", "l2r")),
        "positions": {"source": side.positions[0], "target": side.positions[1]},
        "search": {
            **search_settings(config, side.prefix),
            "generate": "max_new_tokens = min(floor(len(input_ids) * max_len_a + max_len_b), "
            "positions.target - 2) + len(target_prefix) + 1 (EOS forced at the cap, as fairseq "
            "does); the rest is generation_config.json",
        },
    }
    return ModelExport(config.src, config.tgt, info, decode)


def write_fairseq(
    search: Any, step_id: str, inputs: dict[str, Artifact], out: Path, dtype: str, registry: Any
) -> tuple[Side, dict[str, Any]]:
    """A recipe's fairseq model as FSMT or M2M-100, checked against fairseq on a probe, with
    ``spm.model`` and the dictionaries beside it."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    model = inputs["model"]
    if "spm" not in inputs:
        raise DataError(
            f"{step_id}: input spm is not connected; a fairseq model's export needs "
            "the SentencePiece model of its data"
        )
    if "language_tokens" in model.meta:
        raise DataError(
            f"{step_id}: model {model.path} was continued from a pretrained model and "
            "its text carries language tokens; its huggingface export is not "
            "written yet (--format ctranslate2)"
        )
    names = list(dict.fromkeys([*search.models, *model.meta.get("models", [])]))
    args = checkpoint_args(checkpoint_path(model))
    arch = str(args.get("arch", "") if isinstance(args, dict) else getattr(args, "arch", ""))
    reasons = unsupported(args, model_name(arch, names, registry))
    if reasons:
        raise DataError(f"{step_id}: transformers cannot express this model: {'; '.join(reasons)}")
    loaded, task, positions = load_fairseq(model, search.src, search.tgt, names, registry)
    dictionaries = (task.source_dictionary, task.target_dictionary)
    for d in dictionaries:
        ids = (d.bos(), d.pad(), d.eos(), d.unk())
        if ids != (*IDS.values(), UNK):
            raise DataError(
                f"{model.path}: dictionary ids of <s>, <pad>, </s>, <unk> {ids} are "
                f"not fairseq's {(*IDS.values(), UNK)}"
            )
    built = transformers_model(loaded, args, dictionaries, search, positions)
    out.mkdir(parents=True, exist_ok=False)
    built.save_pretrained(str(out), safe_serialization=True)
    written = AutoModelForSeq2SeqLM.from_pretrained(
        str(out), dtype=torch.float32, local_files_only=True, trust_remote_code=False
    ).eval()
    difference = probe(loaded, written, [len(d) for d in dictionaries])
    if not difference <= PROBE_TOLERANCE:
        raise DataError(
            f"{step_id}: the {type(written).__name__} model differs from the fairseq one by "
            f"{difference:.2e} in log-probability on a probe (at most {PROBE_TOLERANCE}); not "
            "exported"
        )
    if dtype != "float32":
        written.to(getattr(torch, dtype)).save_pretrained(str(out), safe_serialization=True)
    cached = bool(written.config.use_cache)
    generation(search, positions[1], [], use_cache=cached).save_pretrained(str(out))
    spm = inputs["spm"]
    shutil.copyfile(spm.file("model", "spm.model"), out / "spm.model")
    for name, d in zip(VOCABS, dictionaries, strict=True):
        vocab = dict(d.indices)  # what fairseq's encode_line looks pieces up in, in id order
        (out / name).write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n")
    direction = str(model.meta.get("direction", "l2r"))
    info = {
        "architecture": type(written).__name__,
        "fairseq": {
            "norm": "pre" if built.config.model_type == "m2m_100" else "post",
            "probe_difference": difference,
        },
        "tokenizer": fairseq_tokenizer(direction),
    }
    return fairseq_side(out, direction, positions), info


def generation(
    search: Any, positions: int | None, prefix: list[int], base: Any = None, use_cache: bool = True
) -> Any:
    """``generation_config.json``: the step's search, fairseq's special ids, ``min_len`` 1 and
    EOS forced at the last position (``max_length``: the decoder's positions)."""
    from transformers import GenerationConfig

    if base is None:  # a fairseq model: its dictionary's ids; fairseq never writes <pad>
        base = GenerationConfig(**IDS, decoder_start_token_id=EOS, suppress_tokens=[1])
    settings: dict[str, Any] = {
        "num_beams": search.beam,
        "do_sample": False,
        "min_new_tokens": 1 + len(prefix),
        "use_cache": use_cache,
    }
    if base.forced_eos_token_id is None:
        settings["forced_eos_token_id"] = base.eos_token_id
    if search.beam > 1:  # fairseq stops at `beam` finished hypotheses, normalised by length
        settings.update(early_stopping=True, length_penalty=search.lenpen)
    if search.no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = search.no_repeat_ngram_size
    if prefix:
        settings["forced_bos_token_id"] = prefix[0]
    if positions:
        settings["max_length"] = positions
    base.update(**settings)
    return base


def fairseq_tokenizer(direction: str) -> dict[str, Any]:
    """``mtcore_export.json``'s ``tokenizer`` of a fairseq model: how fairseq's ids are made."""
    reverse = " reversed (a right-to-left model writes its last piece first)," * (
        direction == "r2l"
    )
    return {
        "kind": "sentencepiece+fairseq-dictionary",
        "files": ["spm.model", *VOCABS],
        "source": "input_ids = [source_vocab[p] if p in source_vocab else 3 for p in "
        "spm.encode(line, out_type=str)] + [2]: the pieces' dictionary ids (<unk> 3 for a piece "
        "the dictionary lacks) and fairseq's EOS; a source over positions.source ids keeps its "
        "first positions.source - 1 pieces and the EOS; an empty line translates to nothing",
        "target": "the generated ids after decoder_start_token_id (2), up to EOS (2), are the "
        f"pieces of target_vocab.json with those ids,{reverse} joined by spm.decode_pieces",
        "special_ids": {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3},
    }


def fairseq_side(out: Path, direction: str, positions: tuple[int | None, int | None]) -> Side:
    """The written directory's SentencePiece model and dictionaries as fairseq uses them."""
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(out / "spm.model"))
    source = json.loads((out / VOCABS[0]).read_text())
    pieces = {i: p for p, i in json.loads((out / VOCABS[1]).read_text()).items()}
    limit = positions[0]

    def encode(lines: list[str]) -> list[list[int]]:
        found = []
        for line in spm.encode(lines, out_type=str):
            kept = line[: limit - 1] if limit is not None else line
            found.append([*(source.get(p, UNK) for p in kept), EOS] if kept else [])
        return found

    def text(ids: list[int]) -> str:
        tokens = [pieces[i] for i in ids]
        return str(spm.decode_pieces(tokens[::-1] if direction == "r2l" else tokens))

    return Side(encode, text, [], positions)


def write_pretrained(
    search: Any, model: Artifact, out: Path, dtype: str
) -> tuple[Side, dict[str, Any]]:
    """A pretrained model's weights in ``dtype``, its config and tokenizer files, and a
    generation config with the step's search and the target language's token."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, GenerationConfig

    hf = AutoModelForSeq2SeqLM.from_pretrained(
        str(model.path), dtype=torch.float32, local_files_only=True, trust_remote_code=False
    )
    out.mkdir(parents=True, exist_ok=False)
    hf.to(getattr(torch, dtype)).save_pretrained(str(out), safe_serialization=True)
    files = [n for n in model.meta.get("files", {}) if n not in ("config.json", WEIGHTS)]
    for name in files:
        shutil.copyfile(model.member(name), out / name)
    written = Artifact(out, dict(model.meta))  # the copied tokenizer is the one used
    tokens = PretrainedTokens.load(
        written, search.src, search.tgt, search.src_token, search.tgt_token
    )
    tok = tokens.tokenizer
    prefix = [int(i) for i in tok.convert_tokens_to_ids(tokens.prefix)]
    positions = model.meta.get("max_positions")
    base = GenerationConfig.from_model_config(hf.config)
    generation(search, positions, prefix, base).save_pretrained(str(out))
    limit = positions

    def encode(lines: list[str]) -> list[list[int]]:
        found = []
        for line in tokens.encode(lines):  # the language token and EOS as the tokenizer writes
            if limit is not None and len(line) > limit:
                line = [*line[: limit - 1], line[-1]]
            found.append([int(i) for i in tok.convert_tokens_to_ids(line)])
        return found

    def text(ids: list[int]) -> str:
        return tokens.decode(tok.convert_ids_to_tokens(ids))

    info = {
        "architecture": type(hf).__name__,
        "tokenizer": {
            "kind": "transformers",
            "class": model.meta.get("tokenizer"),
            "files": files,
            "model": model.meta.get("id"),
            "source": "AutoTokenizer.from_pretrained(DIR) with src_lang set for a multilingual "
            "model; generation_config.json forces the target language's token",
        },
    }
    return Side(encode, text, prefix, (positions, positions)), info


def generate(directory: Path, search: Any, side: Side, lines: list[str]) -> list[str]:
    """``lines`` translated by transformers' ``generate`` on the written directory, each under
    the step's cap (sources of one length together: no padding), an empty line to nothing."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    cuda = search.device != "cpu" and torch.cuda.is_available()
    model = (
        AutoModelForSeq2SeqLM.from_pretrained(
            str(directory),
            dtype="auto" if cuda else torch.float32,
            local_files_only=True,
            trust_remote_code=False,
        )
        .to("cuda" if cuda else "cpu")
        .eval()
    )
    eos = model.generation_config.eos_token_id
    ends = set(eos) if isinstance(eos, list) else {eos}
    sources = side.encode(lines)
    groups: dict[int, list[int]] = {}
    for index, source in enumerate(sources):
        if source:
            groups.setdefault(len(source), []).append(index)
    found = [""] * len(lines)
    skip = 1 + len(side.prefix)  # the decoder start and the target language's token
    for length, indices in sorted(groups.items()):
        cap = math.floor(length * search.max_len_a + search.max_len_b)
        if side.positions[1] is not None:  # fairseq: max_len = positions - 1, cap max_len - 1
            cap = min(cap, side.positions[1] - 2)
        for start in range(0, len(indices), search.batch_size):
            batch = indices[start : start + search.batch_size]
            ids = torch.tensor([sources[i] for i in batch], device=model.device)
            with torch.no_grad():
                rows = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max(cap, 1) + len(side.prefix) + 1,
                )
            for index, row in zip(batch, rows.tolist(), strict=True):
                tokens = row[skip:]
                end = next((i for i, t in enumerate(tokens) if t in ends), len(tokens))
                found[index] = side.text(tokens[:end])
    return found

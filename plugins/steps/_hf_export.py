"""A translate step's model written as a transformers directory (``mtcore export --format
huggingface``): what ``pipeline("translation", model=DIR)`` and
``AutoModelForSeq2SeqLM.from_pretrained(DIR)`` load with transformers' own classes (no
``trust_remote_code``), safetensors weights saved in float32, float16 or bfloat16, a
``generation_config.json`` holding the step's search (the only place: ``config.json`` holds
none), a tokenizer ``AutoTokenizer`` loads, a model card (``README.md``,
:mod:`~mtcore_plugins.steps._hf_card`) and ``mtcore_export.json``.

A fairseq model trained by a recipe maps onto one of two transformers classes, chosen by where
its layer norms sit (:mod:`~mtcore_plugins.steps._hf_fairseq`, which says why not FSMT):

- post-norm (fairseq's ``transformer``: ``normalize_before`` off on both sides) →
  ``MarianMTModel``, which ties the decoder's input and output embeddings (and, with
  ``share_all_embeddings``, the encoder's too), fairseq's sinusoids saved as its position table;
- pre-norm (on on both sides, with fairseq's final layer norms) →
  ``M2M100ForConditionalGeneration``, which shares one embedding between encoder, decoder and
  output (``share_all_embeddings``) and makes fairseq's sinusoids itself.

Both keep fairseq's parameter names, dictionary ids (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2,
``<unk>`` 3) and embedding scale, so the weights are renamed, not converted. What neither
expresses is refused by name before any weight is read, as is a parameter with no place after
the renaming; and the written directory, loaded back, must give fairseq's log-probabilities on
a probe within ``PROBE_TOLERANCE`` and, through ``generate`` with its cache, the ids of
fairseq's beam search (as the step runs it) on probe sources, or nothing is written.

The tokenizer is a ``MarianTokenizer`` (``source.spm``/``target.spm``: the SentencePiece model;
``vocab.json``, and ``target_vocab.json`` when it differs: the fairseq dictionaries): the
pieces' dictionary ids, then EOS, as fairseq's ``encode_line`` makes them.

A pretrained model of the recipe's ``models:`` is a transformers model already: its weights are
written again (in the asked dtype) with its config and tokenizer files, and a generation config
that forces the target language's token (M2M-100, NLLB, mBART-50).

``decode`` translates with ``generate`` on the written directory (its tokenizer, the step's
``a * source + b`` cap, EOS forced there as fairseq forces it) or, unexported, with the step's
own CTranslate2 decoding in float32, so that the export's BLEU check compares them.
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
from mtcore_plugins.steps._hf_card import write_card
from mtcore_plugins.steps._hf_fairseq import (
    EOS,
    IDS,
    PROBE_TOLERANCE,
    UNK,
    fairseq_search,
    load_fairseq,
    probe,
    probe_sources,
    save,
    transformers_model,
    unsupported,
)

DTYPES = ("float32", "float16", "bfloat16")
"""The weights' saved type (``--quantization``); transformers has no int8 format of its own."""


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
    return ModelExport(config.src, config.tgt, info, decode, write_card)


def write_fairseq(
    search: Any, step_id: str, inputs: dict[str, Artifact], out: Path, dtype: str, registry: Any
) -> tuple[Side, dict[str, Any]]:
    """A recipe's fairseq model as Marian or M2M-100 with a MarianTokenizer's files, checked
    against fairseq: forced log-probabilities on a probe, and fairseq's beam search against
    ``generate`` (cache on, as ``pipeline`` runs it) on probe sources."""
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
    save(built, out)
    generation(search, positions[1], []).save_pretrained(str(out))
    write_tokenizer(out, inputs["spm"].file("model", "spm.model"), dictionaries, search, positions)
    written = AutoModelForSeq2SeqLM.from_pretrained(
        str(out), dtype=torch.float32, local_files_only=True, trust_remote_code=False
    ).eval()
    kind = type(written).__name__
    difference = probe(loaded, written, [len(d) for d in dictionaries])
    if not difference <= PROBE_TOLERANCE:
        raise DataError(
            f"{step_id}: the {kind} model differs from the fairseq one by {difference:.2e} in "
            f"log-probability on a probe (at most {PROBE_TOLERANCE}); not exported"
        )
    sources = probe_sources(len(dictionaries[0]))
    theirs = fairseq_search(loaded, task, search, sources)
    ours = generate_ids(written, search, [], positions[1], sources)
    for number, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        if a != b:
            raise DataError(
                f"{step_id}: the {kind} model's generate gives other ids than fairseq's beam "
                f"search on probe source {number} ({b} against {a}); not exported"
            )
    if dtype != "float32":
        save(written.to(getattr(torch, dtype)), out)
    direction = str(model.meta.get("direction", "l2r"))
    info = {
        "architecture": kind,
        "fairseq": {
            "norm": "pre" if built.config.model_type == "m2m_100" else "post",
            "probe_difference": difference,
            "probe_searches": len(sources),
        },
        "tokenizer": fairseq_tokenizer(direction),
    }
    return tokenizer_side(out, direction, positions), info


def write_tokenizer(
    out: Path, spm: Path, dictionaries: tuple[Any, Any], search: Any, positions: Any
) -> None:
    """A MarianTokenizer's files: the SentencePiece model (as ``source.spm`` and
    ``target.spm``), the fairseq dictionaries as ``vocab.json`` (and ``target_vocab.json`` when
    the target's differs); its ids are fairseq's (the pieces', ``<unk>`` for one the dictionary
    lacks, then ``</s>``)."""
    from transformers import MarianTokenizer

    vocabs = [dict(d.indices) for d in dictionaries]  # what fairseq's encode_line looks up
    separate = vocabs[0] != vocabs[1]
    files: dict[str, dict[str, int] | None] = {
        "source.spm": None,
        "target.spm": None,
        "vocab.json": vocabs[0],
    }
    if separate:
        files["target_vocab.json"] = vocabs[1]
    for name, vocab in files.items():
        if vocab is None:
            shutil.copyfile(spm, out / name)
        else:
            (out / name).write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n")
    tokenizer = MarianTokenizer(
        source_spm=str(out / "source.spm"),
        target_spm=str(out / "target.spm"),
        vocab=str(out / "vocab.json"),
        target_vocab_file=str(out / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
        source_lang=search.src,
        target_lang=search.tgt,
        model_max_length=positions[0] or 1024,
        clean_up_tokenization_spaces=False,  # the pieces' text as SentencePiece decodes it
    )
    tokenizer.save_pretrained(str(out))


def generation(search: Any, positions: int | None, prefix: list[int], base: Any = None) -> Any:
    """``generation_config.json``: the step's search, fairseq's special ids, ``min_len`` 1 and
    EOS forced at the last position (``max_length``: the decoder's positions)."""
    from transformers import GenerationConfig

    if base is None:  # a fairseq model: its dictionary's ids; fairseq never writes <pad>
        base = GenerationConfig(**IDS, decoder_start_token_id=EOS, suppress_tokens=[1])
    settings: dict[str, Any] = {
        "num_beams": search.beam,
        "do_sample": False,
        "min_new_tokens": 1 + len(prefix),
        "use_cache": True,
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
        "kind": "transformers",
        "class": "MarianTokenizer",
        "files": ["source.spm", "target.spm", "vocab.json", "tokenizer_config.json"],
        "source": "AutoTokenizer.from_pretrained(DIR)(line).input_ids: the SentencePiece pieces' "
        "ids in fairseq's dictionary (<unk> 3 for a piece it lacks) and fairseq's EOS (2), as "
        "fairseq's encode_line makes them; an empty line translates to nothing",
        "target": "tokenizer.decode(generated ids, skip_special_tokens=True):"
        f"{reverse} the pieces joined by SentencePiece",
        "special_ids": {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3},
    }


def tokenizer_side(out: Path, direction: str, positions: tuple[int | None, int | None]) -> Side:
    """The written directory's tokenizer as ``AutoTokenizer`` loads it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    limit = positions[0]

    def encode(lines: list[str]) -> list[list[int]]:
        found = []
        for ids in tokenizer(lines)["input_ids"] if lines else []:
            if limit is not None and len(ids) > limit:
                ids = [*ids[: limit - 1], EOS]
            found.append(ids if len(ids) > 1 else [])
        return found

    def text(ids: list[int]) -> str:
        if direction == "r2l":
            tokens = tokenizer.convert_ids_to_tokens(ids)[::-1]
            return str(tokenizer.convert_tokens_to_string(tokens))
        return str(tokenizer.decode(ids, skip_special_tokens=True))

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
    the step's cap, an empty line to nothing."""
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
    sources = side.encode(lines)
    kept = [i for i, source in enumerate(sources) if source]
    outputs = generate_ids(
        model, search, side.prefix, side.positions[1], [sources[i] for i in kept]
    )
    found = [""] * len(lines)
    for index, ids in zip(kept, outputs, strict=True):
        found[index] = side.text(ids)
    return found


def generate_ids(
    model: Any, search: Any, prefix: list[int], positions: int | None, sources: list[list[int]]
) -> list[list[int]]:
    """The output ids (after the decoder start and ``prefix``, before EOS) of ``generate`` on
    each source under the step's cap (fairseq's: ``a * ids + b``, at most ``positions - 2``),
    sources of one length in a batch (no padding)."""
    import torch

    eos = model.generation_config.eos_token_id
    ends = set(eos) if isinstance(eos, list) else {eos}
    groups: dict[int, list[int]] = {}
    for index, source in enumerate(sources):
        groups.setdefault(len(source), []).append(index)
    found: list[list[int]] = [[] for _ in sources]
    skip = 1 + len(prefix)  # the decoder start and the target language's token
    for length, indices in sorted(groups.items()):
        cap = math.floor(length * search.max_len_a + search.max_len_b)
        if positions is not None:  # fairseq: max_len = positions - 1, cap max_len - 1
            cap = min(cap, positions - 2)
        for start in range(0, len(indices), search.batch_size):
            batch = indices[start : start + search.batch_size]
            ids = torch.tensor([sources[i] for i in batch], device=model.device)
            with torch.no_grad():
                rows = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max(cap, 1) + len(prefix) + 1,
                )
            for index, row in zip(batch, rows.tolist(), strict=True):
                tokens = row[skip:]
                end = next((i for i, t in enumerate(tokens) if t in ends), len(tokens))
                found[index] = tokens[:end]
    return found

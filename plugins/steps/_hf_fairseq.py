"""A recipe's fairseq Transformer as transformers' Marian (post-norm) or M2M-100 (pre-norm), for
:mod:`~mtcore_plugins.steps._hf_export`: what neither can express (:func:`unsupported`), the
model with fairseq's weights renamed (:func:`transformers_model`), and the probes that compare
the two: forced log-probabilities (:func:`probe`) and fairseq's own beam search
(:func:`fairseq_search`) against ``generate`` with its cache.

Not FSMT, transformers' port of this very model: in transformers 4.57 its decoder reads a
cached step's position from the one-token input (always the first position,
huggingface/transformers#21719), and with the cache off builds no causal mask under
``generate`` (which passes ``encoder_outputs``, not ``input_ids``): earlier target positions
see later ones. Marian is post-norm too, with no embedding layer norm; its positions are a
table indexed from 0 that it does not save (and, missing from a checkpoint, fills with
sinusoids of other frequencies), so the export saves fairseq's table from ``padding_idx + 1``
in it and ``from_pretrained`` loads it as any weight."""

from __future__ import annotations

from typing import Any

from mtcore.api import Artifact, DataError
from mtcore_plugins.common.ct2.convert import checkpoint_path
from mtcore_plugins.common.fairseq.model_extension import registered

MODELS = ("transformer", "mtcore_transformer")
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_accurate": "gelu_new",
    "gelu_fast": "gelu_new",
    "tanh": "tanh",
    "linear": "linear",
    "swish": "silu",
}
"""fairseq's --activation-fn -> transformers' ACT2FN name of the same function."""
IDS = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2}
"""fairseq's Dictionary ids, which Marian's and M2M-100's configs take as theirs."""
UNK = 3
EOS = IDS["eos_token_id"]
NORMFORMER = ("scale_attn", "scale_fc", "scale_heads", "scale_resids")
NAMED = {"rpe": "relative positions (Shaw et al., 2018)"}
"""Extensions whose ``ctranslate2`` reason is None (CTranslate2 runs them; transformers not)."""
PROBE_TOLERANCE = 1e-4
SKIPPED = (".version", "._float_tensor")  # fairseq's bookkeeping buffers, no weights


def unsupported(args: Any, model: str) -> list[str]:
    """What transformers' Marian and M2M-100 cannot express in a fairseq ``model`` of these
    checkpoint arguments (empty: one of them can)."""
    import argparse

    get = args.get if isinstance(args, dict) else lambda k, d=None: getattr(args, k, d)
    reasons = []
    if model not in MODELS:
        reasons.append(f"fairseq model {model!r} (expressible: {', '.join(MODELS)})")
    namespace = argparse.Namespace(**args) if isinstance(args, dict) else args
    for extension in registered():
        if extension.active(namespace):
            what = NAMED.get(extension.name) or extension.ctranslate2 or "a model extension"
            reasons.append(f"{what} (model extension {extension.name!r})")
    if get("activation_fn", "relu") not in ACTIVATIONS:
        reasons.append(f"activation {get('activation_fn')!r} (valid: {', '.join(ACTIVATIONS)})")
    sides = {
        bool(get("encoder_normalize_before", False)),
        bool(get("decoder_normalize_before", False)),
    }
    pre, post = sides == {True}, sides == {False}
    tied = get("share_all_embeddings", False) or get("share_decoder_input_output_embed", False)
    width = get("decoder_embed_dim", None)
    checks = [
        (len(sides) > 1, "pre-norm layers on one side and "
         "post-norm on the other (Marian is post-norm on both, M2M-100 pre-norm on both)"),
        (pre and not get("share_all_embeddings", False), "separate source and target embeddings "
         "in a pre-norm model (M2M-100 shares one: train with share_all_embeddings)"),
        (pre and get("no_decoder_final_norm", False), "a pre-norm decoder without its final "
         "layer norm (M2M-100 has one)"),
        (post and not tied, "separate decoder input and output embeddings (Marian ties them: "
         "train with share_all_embeddings or --share-decoder-input-output-embed)"),
        *((get(f"{side}_learned_pos", False), f"learned {side} positions (Marian and M2M-100 have "
           "sinusoidal ones)") for side in ("encoder", "decoder")),
        (get("layernorm_embedding", False), "a layer norm over the embeddings"),
        (get("no_token_positional_embeddings", False), "no position embeddings at all"),
        (get("adaptive_softmax_cutoff", None) or get("adaptive_input", False),
         "adaptive input or softmax layers"),
        (get("cross_self_attention", False) or get("no_cross_attention", False),
         "a decoder without plain encoder-decoder attention"),
        (int(get("quant_noise_pq", 0) or 0) > 0, "quant-noise (product-quantized) layers"),
        (any(get(k, False) for k in NORMFORMER), f"NormFormer scaling ({', '.join(NORMFORMER)})"),
        (int(get("base_layers", 0) or 0) > 0, "BASE layers"),
        ({get("decoder_output_dim", None), get("decoder_input_dim", None)} - {None, width},
         "a decoder whose input or output dimension is unlike its embedding's"),
        (get("encoder_embed_dim", None) != width, "encoder and decoder of different widths"),
    ]  # fmt: skip
    reasons += [reason for failed, reason in checks if failed]
    return [f"{reason} [arch {get('arch', '?')}]" for reason in reasons]


def load_fairseq(
    model: Artifact, src: str, tgt: str, names: list[str], registry: Any
) -> tuple[Any, Any, tuple[int | None, int | None]]:
    """The fairseq model (mtcore's architectures registered, checkpoints read by torch's
    weights-only loader, as :mod:`~mtcore_plugins.common.ct2.convert` reads them), its task and
    (source, target) positions."""
    import torch

    from mtcore_plugins.common.fairseq.setup import (
        add_safe_globals,
        importing_fairseq,
        register_models,
    )

    with importing_fairseq():
        from fairseq import checkpoint_utils, utils

    register_models(names, registry)
    add_safe_globals()
    with torch.no_grad():
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint_path(model))],
            arg_overrides={"data": str(model.path), "source_lang": src, "target_lang": tgt},
        )
    loaded = models[0].eval()
    limits = utils.resolve_max_positions(task.max_positions(), loaded.max_positions())
    return loaded, task, (limits[0], limits[1]) if limits else (None, None)


def transformers_model(
    loaded: Any,
    args: Any,
    dictionaries: tuple[Any, Any],
    search: Any,
    positions: tuple[int | None, int | None],
) -> Any:
    """Marian (post-norm) or M2M-100 (pre-norm) with the fairseq model's weights, renamed."""
    import torch
    from transformers import (
        M2M100Config,
        M2M100ForConditionalGeneration,
        MarianConfig,
        MarianMTModel,
    )

    get = args.get if isinstance(args, dict) else lambda k, d=None: getattr(args, k, d)
    encoder, decoder = loaded.encoder, loaded.decoder
    settings = {
        "d_model": encoder.embed_tokens.embedding_dim,
        "encoder_layers": len(encoder.layers),
        "decoder_layers": len(decoder.layers),
        "encoder_attention_heads": encoder.layers[0].self_attn.num_heads,
        "decoder_attention_heads": decoder.layers[0].self_attn.num_heads,
        "encoder_ffn_dim": encoder.layers[0].fc1.out_features,
        "decoder_ffn_dim": decoder.layers[0].fc1.out_features,
        "activation_function": ACTIVATIONS[str(get("activation_fn", "relu"))],
        "max_position_embeddings": max(p or 1024 for p in positions),
        "scale_embedding": encoder.embed_scale != 1.0,
        **IDS,
        "decoder_start_token_id": EOS,
        **dict.fromkeys(("dropout", "attention_dropout", "activation_dropout"), 0.0),
        **dict.fromkeys(("encoder_layerdrop", "decoder_layerdrop"), 0.0),
    }
    state = {k: v for k, v in loaded.state_dict().items() if not k.endswith(SKIPPED)}
    renamed = {
        ("lm_head.weight" if k == "decoder.output_projection.weight" else f"model.{k}"): v
        for k, v in state.items()
    }
    built: Any
    if encoder.layers[0].normalize_before:
        built = M2M100ForConditionalGeneration(
            M2M100Config(vocab_size=len(dictionaries[1]), **settings)
        )
        renamed["model.shared.weight"] = state["encoder.embed_tokens.weight"]
    else:
        shared = encoder.embed_tokens.weight is decoder.embed_tokens.weight
        config = MarianConfig(
            vocab_size=len(dictionaries[0]),
            decoder_vocab_size=len(dictionaries[1]),
            share_encoder_decoder_embeddings=shared,
            tie_word_embeddings=True,
            forced_eos_token_id=None,  # Marian's 0 otherwise; generation_config.json holds 2
            **settings,
        )
        built = MarianMTModel(config)
        if shared:
            renamed["model.shared.weight"] = state["encoder.embed_tokens.weight"]
        renamed["final_logits_bias"] = torch.zeros(1, len(dictionaries[1]))
        size = settings["max_position_embeddings"]
        for name, side in (("encoder", encoder), ("decoder", decoder)):
            renamed[f"model.{name}.embed_positions.weight"] = fairseq_positions(side, size)
    kind = type(built).__name__
    own = built.state_dict()
    extra = sorted(set(renamed) - set(own))
    missing = sorted(k for k in set(own) - set(renamed) if ".embed_positions." not in k)
    if extra or missing:
        raise DataError(f"{kind} has no place for {extra[:5]} (or lacks {missing[:5]})")
    tied: dict[int, list[str]] = {}  # one tensor in transformers: fairseq's must be equal
    for name, parameter in built.named_parameters(remove_duplicate=False):
        tied.setdefault(id(parameter), []).append(name)
    for group in tied.values():
        given = [renamed[n] for n in group if n in renamed]
        if any(not torch.equal(given[0], other) for other in given[1:]):
            raise DataError(f"{' and '.join(group)} are one tensor in {kind}; this model's differ")
    try:
        built.load_state_dict({k: v for k, v in renamed.items()}, strict=False)
    except RuntimeError as exc:
        raise DataError(f"{kind}: {str(exc).splitlines()[-1].strip()}") from None
    return built.eval()


def fairseq_positions(side: Any, size: int) -> Any:
    """fairseq's sinusoids of ``side`` (encoder or decoder) for its first ``size`` tokens
    (positions ``padding_idx + 1`` on): Marian's table, which it indexes from 0."""
    import torch

    with torch.no_grad():
        return side.embed_positions(torch.full((1, size), EOS)).reshape(size, -1).clone()


def save(model: Any, out: Any) -> None:
    """``model`` in ``out`` as safetensors, Marian's position table included (its class leaves
    it out, being the sinusoids it makes)."""
    model._keys_to_ignore_on_save = None
    model.save_pretrained(str(out), safe_serialization=True)


def fairseq_search(loaded: Any, task: Any, search: Any, sources: list[list[int]]) -> list[Any]:
    """fairseq's beam search of each source alone as the step runs it (its
    ``SequenceGenerator`` with the step's beam, length penalty, ``a * source + b`` cap and
    n-gram block, as :class:`~mtcore_plugins.common.decoding.translator.Translator` mends
    them): the output ids before EOS."""
    import torch

    from mtcore_plugins.common.decoding.translator import block_repeats_by_step, limit_rows
    from mtcore_plugins.common.fairseq.setup import importing_fairseq

    with importing_fairseq():
        from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator(
        [loaded],
        task.target_dictionary,
        beam_size=search.beam,
        max_len_a=search.max_len_a,
        max_len_b=search.max_len_b,
        min_len=1,
        len_penalty=search.lenpen,
        no_repeat_ngram_size=search.no_repeat_ngram_size or 0,
    )
    limit_rows(generator, search.max_len_a, search.max_len_b)
    block_repeats_by_step(generator)
    found = []
    for source in sources:
        src = torch.tensor([source])
        sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([len(source)])}}
        with torch.no_grad():
            tokens = generator.generate([loaded], sample)[0][0]["tokens"].tolist()
        found.append(tokens[:-1] if tokens[-1:] == [EOS] else tokens)
    return found


def probe_sources(size: int) -> list[list[int]]:
    """Three sources of 5, 10 and 17 ids spread over a dictionary of ``size``, EOS last."""
    return [
        [4 + (i * 7919 + n * 104729) % (size - 4) for i in range(n)] + [EOS] for n in (4, 9, 16)
    ]


def probe(loaded: Any, written: Any, sizes: list[int]) -> float:
    """Largest difference of the two models' log-probabilities of a forced target (spread over
    the dictionaries) given a source."""
    import torch

    rows = range(2)
    source = [[4 + (i * 7919 + r * 104729) % (sizes[0] - 4) for i in range(15)] + [2] for r in rows]
    target = [[2] + [4 + (i * 4099 + r * 7) % (sizes[1] - 4) for i in range(11)] for r in rows]
    src, tgt = torch.tensor(source), torch.tensor(target)
    with torch.no_grad():
        theirs = loaded.get_normalized_probs(
            loaded(src, torch.full((len(source),), src.shape[1]), tgt), log_probs=True
        )
        # use_cache off: FSMT's decoder builds no cache of its own outside generate
        ours = (
            written(
                input_ids=src,
                attention_mask=torch.ones_like(src),
                decoder_input_ids=tgt,
                use_cache=False,
            )
            .logits.float()
            .log_softmax(-1)
        )
    return float((theirs.float() - ours).abs().max())

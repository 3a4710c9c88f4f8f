"""A recipe's fairseq Transformer as transformers' FSMT (post-norm) or M2M-100 (pre-norm), for
:mod:`~mtcore_plugins.steps._hf_export`: what neither can express (:func:`unsupported`), the
model with fairseq's weights renamed (:func:`transformers_model`), and the probe that compares
the two (:func:`probe`)."""

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
"""fairseq's Dictionary ids, which FSMT's and M2M-100's configs take as theirs."""
UNK = 3
EOS = IDS["eos_token_id"]
NORMFORMER = ("scale_attn", "scale_fc", "scale_heads", "scale_resids")
NAMED = {"rpe": "relative positions (Shaw et al., 2018)"}
"""Extensions whose ``ctranslate2`` reason is None (CTranslate2 runs them; transformers not)."""
PROBE_TOLERANCE = 1e-4
SKIPPED = (".version", "._float_tensor")  # fairseq's bookkeeping buffers, no weights


def unsupported(args: Any, model: str) -> list[str]:
    """What transformers' FSMT and M2M-100 cannot express in a fairseq ``model`` of these
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
         "post-norm on the other (FSMT is post-norm on both, M2M-100 pre-norm on both)"),
        (pre and not get("share_all_embeddings", False), "separate source and target embeddings "
         "in a pre-norm model (M2M-100 shares one: train with share_all_embeddings)"),
        (pre and get("no_decoder_final_norm", False), "a pre-norm decoder without its final "
         "layer norm (M2M-100 has one)"),
        (post and not tied, "separate decoder input and output embeddings (FSMT ties them: "
         "train with share_all_embeddings or --share-decoder-input-output-embed)"),
        *((get(f"{side}_learned_pos", False), f"learned {side} positions (FSMT and M2M-100 have "
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
    """FSMT (post-norm) or M2M-100 (pre-norm) with the fairseq model's weights, renamed."""
    import torch
    from transformers import (
        FSMTConfig,
        FSMTForConditionalGeneration,
        M2M100Config,
        M2M100ForConditionalGeneration,
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
    built: Any
    if encoder.layers[0].normalize_before:
        built = M2M100ForConditionalGeneration(
            M2M100Config(vocab_size=len(dictionaries[1]), **settings)
        )
        renamed = {
            ("lm_head.weight" if k == "decoder.output_projection.weight" else f"model.{k}"): v
            for k, v in state.items()
        }
        renamed["model.shared.weight"] = state["encoder.embed_tokens.weight"]
    else:
        shared = encoder.embed_tokens.weight is decoder.embed_tokens.weight
        # use_cache off: transformers' FSMT reads the positions of a cached step from the
        # one-token input, i.e. always the first (fixed upstream in transformers PR #48289);
        # without the cache every step runs the whole prefix again, exactly
        config = FSMTConfig(
            langs=[search.src, search.tgt],
            src_vocab_size=len(dictionaries[0]),
            tgt_vocab_size=len(dictionaries[1]),
            tie_word_embeddings=shared,
            use_cache=False,
            **settings,
        )
        built = FSMTForConditionalGeneration(config)
        renamed = {f"model.{k}": v for k, v in state.items()}
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

"""A loaded fairseq Transformer (fairseq's ``transformer`` or mtcore's ``mtcore_transformer``)
as a CTranslate2 ``TransformerSpec``: the module-to-spec mapping of CTranslate2's own fairseq
converter (``ctranslate2/converters/fairseq.py``), generalised to an encoder and a decoder that
may differ in depth, heads, pre/post-LN and positions, plus Shaw et al. (2018) relative
positions (``mtcore_plugins.models.rpe``). Callers check :func:`convert.unsupported` first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_fast": "GELUTanh", "gelu_accurate": "GELUTanh"}

LAYER_NORM_EPSILON = 1e-5  # fairseq's LayerNorm default


def transformer_spec(model: Any, src_dict: Any, tgt_dict: Any) -> Any:
    from ctranslate2.specs import common_spec, transformer_spec

    encoder, decoder = model.encoder, model.decoder
    activation = getattr(common_spec.Activation, ACTIVATIONS[encoder.cfg.activation_fn])
    enc_rpe = _relative(encoder.layers[0].self_attn)
    dec_rpe = _relative(decoder.layers[0].self_attn)
    enc_spec = transformer_spec.TransformerEncoderSpec(
        len(encoder.layers),
        encoder.layers[0].self_attn.num_heads,
        pre_norm=bool(encoder.layers[0].normalize_before),
        no_final_norm=encoder.layer_norm is None,
        activation=activation,
        layernorm_embedding=encoder.layernorm_embedding is not None,
        relative_position=enc_rpe,
    )
    dec_spec = transformer_spec.TransformerDecoderSpec(
        len(decoder.layers),
        decoder.layers[0].self_attn.num_heads,
        pre_norm=bool(decoder.layers[0].normalize_before),
        no_final_norm=decoder.layer_norm is None,
        activation=activation,
        layernorm_embedding=decoder.layernorm_embedding is not None,
        project_in_out=decoder.project_in_dim is not None or decoder.project_out_dim is not None,
        relative_position=dec_rpe,
    )
    _encoder(enc_spec, encoder)
    _decoder(dec_spec, decoder)
    spec = transformer_spec.TransformerSpec(enc_spec, dec_spec)
    spec.register_source_vocabulary(_vocabulary(src_dict))
    spec.register_target_vocabulary(_vocabulary(tgt_dict))
    # fairseq: the source ends with EOS; the decoder starts from EOS.
    spec.config.decoder_start_token = spec.config.eos_token
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    return spec


def _relative(attention: Any) -> bool:
    return hasattr(attention, "rel_keys")


def _vocabulary(dictionary: Any) -> list[str]:
    return ["<blank>" if token == "<pad>" else token for token in dictionary.symbols]


def _encoder(spec: Any, module: Any) -> None:
    _inputs(spec, module)
    for layer_spec, layer in zip(spec.layer, module.layers, strict=True):
        _ffn(layer_spec.ffn, layer)
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
    _final_norms(spec, module)


def _decoder(spec: Any, module: Any) -> None:
    _inputs(spec, module)
    _linear(spec.projection, module.output_projection)
    for layer_spec, layer in zip(spec.layer, module.layers, strict=True):
        _ffn(layer_spec.ffn, layer)
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        _attention(layer_spec.attention, layer.encoder_attn)
        _layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
    _final_norms(spec, module)
    if module.project_in_dim is not None:
        _linear(spec.project_in, module.project_in_dim)
    if module.project_out_dim is not None:
        _linear(spec.project_out, module.project_out_dim)


def _final_norms(spec: Any, module: Any) -> None:
    if module.layer_norm is not None:
        _layer_norm(spec.layer_norm, module.layer_norm)
    if module.layernorm_embedding is not None:
        _layer_norm(spec.layernorm_embedding, module.layernorm_embedding)


def _inputs(spec: Any, module: Any) -> None:
    positions = module.embed_positions
    if positions is not None:  # None: relative positions replace them (NT5 §4.1)
        table = positions.weight if hasattr(positions, "weight") else positions.weights
        spec.position_encodings.encodings = _array(table)[positions.padding_idx + 1 :]
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(module.embed_tokens.weight)
    spec.scale_embeddings = module.embed_scale


def _ffn(spec: Any, layer: Any) -> None:
    _layer_norm(spec.layer_norm, layer.final_layer_norm)
    _linear(spec.linear_0, layer.fc1)
    _linear(spec.linear_1, layer.fc2)


def _attention(spec: Any, module: Any, self_attention: bool = False) -> None:
    """fairseq's separate q/k/v projections fused as CTranslate2 reads them: [qkv] for
    self-attention, [q] and [kv] for encoder-decoder attention."""
    from ctranslate2.converters import utils
    from ctranslate2.specs import common_spec

    if self_attention:
        parts = [common_spec.LinearSpec() for _ in range(3)]
        for part, proj in zip(parts, (module.q_proj, module.k_proj, module.v_proj), strict=True):
            _linear(part, proj)
        utils.fuse_linear(spec.linear[0], parts)
    else:
        _linear(spec.linear[0], module.q_proj)
        parts = [common_spec.LinearSpec() for _ in range(2)]
        _linear(parts[0], module.k_proj)
        _linear(parts[1], module.v_proj)
        utils.fuse_linear(spec.linear[1], parts)
    _linear(spec.linear[-1], module.out_proj)
    if _relative(module):
        # Shaw et al. §3: a^K and a^V over clip(j - i, k) + k, shared by the heads; CTranslate2
        # reads k from the table's 2k+1 rows. A keys-only model adds nothing to the values.
        keys = _array(module.rel_keys)
        spec.relative_position_keys = keys
        values = module.rel_values
        spec.relative_position_values = _array(values) if values is not None else 0 * keys


def _layer_norm(spec: Any, module: Any) -> None:
    spec.gamma = _array(module.weight)
    spec.beta = _array(module.bias)


def _linear(spec: Any, module: Any) -> None:
    spec.weight = _array(module.weight)
    if module.bias is not None:
        spec.bias = _array(module.bias)


def _array(tensor: Any) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().float().cpu().numpy())

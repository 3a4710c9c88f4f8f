"""The layer loops of ``mtcore_transformer``'s encoder and decoder: fairseq 0.12's
``forward_scriptable`` / ``extract_features_scriptable`` with the extension point's stack hooks
(``start``, ``next_input``, ``after_layer``: DLCL's combination of every earlier output, the
adapters after every layer). A stack's ``extensions`` are its model's active ones."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _start(stack: Any, states: list[Tensor], x: Tensor) -> None:
    for extension in stack.extensions:
        extension.start(stack, states, x)


def _next_input(stack: Any, states: list[Tensor], x: Tensor) -> Tensor:
    for extension in stack.extensions:
        value = extension.next_input(stack, states, x)
        if value is not None:
            return value  # type: ignore[no-any-return]
    return x


def _after_layer(stack: Any, index: int, states: list[Tensor], x: Tensor) -> Tensor:
    for extension in stack.extensions:
        x = extension.after_layer(stack, index, states, x)
    return x


def encoder_forward(
    encoder: Any,
    src_tokens: Tensor,
    return_all_hiddens: bool,
    token_embeddings: Tensor | None,
) -> dict[str, list[Tensor]]:
    """As fairseq's ``TransformerEncoderBase.forward_scriptable``."""
    padding_mask = src_tokens.eq(encoder.padding_idx)
    has_pads = bool(padding_mask.any())
    x, embedding = encoder.forward_embedding(src_tokens, token_embeddings)
    if has_pads:
        x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
    x = x.transpose(0, 1)  # B x T x C -> T x B x C
    hidden: list[Tensor] = [x] if return_all_hiddens else []
    states: list[Tensor] = []
    _start(encoder, states, x)
    for index, layer in enumerate(encoder.layers):
        x = layer(
            _next_input(encoder, states, x), encoder_padding_mask=padding_mask if has_pads else None
        )
        x = _after_layer(encoder, index, states, x)
        if return_all_hiddens:
            hidden.append(x)
    x = _next_input(encoder, states, x)
    if encoder.layer_norm is not None:
        x = encoder.layer_norm(x)
    lengths = src_tokens.ne(encoder.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)
    return {
        "encoder_out": [x],  # T x B x C
        "encoder_padding_mask": [padding_mask],  # B x T
        "encoder_embedding": [embedding],  # B x T x C
        "encoder_states": hidden,  # List[T x B x C]
        "fc_results": [],
        "src_tokens": [],
        "src_lengths": [lengths.contiguous()],
    }


def decoder_features(
    decoder: Any,
    prev_output_tokens: Tensor,
    encoder_out: dict[str, list[Tensor]] | None,
    incremental_state: dict[str, dict[str, Tensor | None]] | None,
    full_context_alignment: bool,
    alignment_layer: int | None,
    alignment_heads: int | None,
) -> tuple[Tensor, dict[str, Any]]:
    """As fairseq's ``TransformerDecoderBase.extract_features_scriptable``."""
    if alignment_layer is None:
        alignment_layer = decoder.num_layers - 1
    enc = padding = None
    if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
        enc = encoder_out["encoder_out"][0]
    if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
        padding = encoder_out["encoder_padding_mask"][0]
    x, self_padding = _decoder_embedding(decoder, prev_output_tokens, incremental_state)
    attn: Tensor | None = None
    inner: list[Tensor | None] = [x]
    states: list[Tensor] = []
    _start(decoder, states, x)
    for index, layer in enumerate(decoder.layers):
        future = None
        if incremental_state is None and not full_context_alignment:
            future = decoder.buffered_future_mask(x)
        x, layer_attn, _ = layer(
            _next_input(decoder, states, x),
            enc,
            padding,
            incremental_state,
            self_attn_mask=future,
            self_attn_padding_mask=self_padding,
            need_attn=index == alignment_layer,
            need_head_weights=index == alignment_layer,
        )
        x = _after_layer(decoder, index, states, x)
        inner.append(x)
        if layer_attn is not None and index == alignment_layer:
            attn = layer_attn.float().to(x)
    if attn is not None:
        if alignment_heads is not None:
            attn = attn[:alignment_heads]
        attn = attn.mean(dim=0)  # average over heads
    x = _next_input(decoder, states, x)
    if decoder.layer_norm is not None:
        x = decoder.layer_norm(x)
    x = x.transpose(0, 1)  # T x B x C -> B x T x C
    if decoder.project_out_dim is not None:
        x = decoder.project_out_dim(x)
    return x, {"attn": [attn], "inner_states": inner}


def _decoder_embedding(
    decoder: Any, tokens: Tensor, incremental_state: Any
) -> tuple[Tensor, Tensor | None]:
    """Token (+ absolute position) embeddings of the decoder input, (T, B, C), and the
    self-attention padding mask."""
    positions = None
    if decoder.embed_positions is not None:
        positions = decoder.embed_positions(tokens, incremental_state=incremental_state)
    if incremental_state is not None:
        tokens = tokens[:, -1:]
        if positions is not None:
            positions = positions[:, -1:]
    tokens = tokens.contiguous()
    x = decoder.embed_scale * decoder.embed_tokens(tokens)
    if decoder.quant_noise is not None:
        x = decoder.quant_noise(x)
    if decoder.project_in_dim is not None:
        x = decoder.project_in_dim(x)
    if positions is not None:
        x = x + positions
    if decoder.layernorm_embedding is not None:
        x = decoder.layernorm_embedding(x)
    x = decoder.dropout_module(x).transpose(0, 1)
    self_padding = None
    if decoder.cross_self_attention or tokens.eq(decoder.padding_idx).any():
        self_padding = tokens.eq(decoder.padding_idx)
    return x, self_padding

"""Self-attention with relative position representations (Shaw et al., 2018).

    e_ij = q_i . (k_j + a^K_{c(j-i)}) / sqrt(d_head)      z_i = sum_j alpha_ij (v_j + a^V_{c(j-i)})

with ``c(x) = max(-k, min(k, x)) + k``: 2k+1 learned vectors of the head size for keys and for
values, shared across the heads of a layer (Shaw et al. §3.2). NT5 §4.1 uses them in the
encoder in place of absolute positions, with k = 16. The module keeps fairseq's
``MultiheadAttention`` projections (same parameter names, init and incremental buffers), so a
decoder using it decodes incrementally and reorders its cache under beam search as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from mtcore_plugins.common.fairseq.model_extension import ModelExtension

NT5_MAX_DISTANCE = 16  # NT5 §4.1: "Following Shaw et al. (2018), we set clipping distance k to 16"


def relative_buckets(query_len: int, key_len: int, max_distance: int, device: Any) -> Tensor:
    """(query_len, key_len) indices ``clip(j - i, k) + k``. The queries are the last
    ``query_len`` of the ``key_len`` positions (incremental decoding feeds one query at a time)."""
    queries = torch.arange(key_len - query_len, key_len, device=device)
    keys = torch.arange(key_len, device=device)
    distance = keys[None, :] - queries[:, None]
    return distance.clamp(-max_distance, max_distance) + max_distance


class RelativeSelfAttention(MultiheadAttention):
    """Self-attention only; ``key`` and ``value`` are ignored (they are the query)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        max_distance: int,
        dropout: float = 0.0,
        values: bool = True,
    ) -> None:
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True)
        if max_distance < 1:
            raise ValueError(f"relative positions need max_distance >= 1, got {max_distance}")
        self.max_distance = max_distance
        buckets = 2 * max_distance + 1
        self.rel_keys = nn.Parameter(torch.empty(buckets, self.head_dim))
        self.rel_values = nn.Parameter(torch.empty(buckets, self.head_dim)) if values else None
        for table in (self.rel_keys, self.rel_values):
            if table is not None:
                nn.init.normal_(table, mean=0.0, std=self.head_dim**-0.5)

    def forward(  # type: ignore[override]
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        incremental_state: dict[str, dict[str, Tensor | None]] | None = None,
        need_weights: bool = False,
        static_kv: bool = False,
        attn_mask: Tensor | None = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``query``: (T, B, C); ``attn_mask``: additive (T, S); ``key_padding_mask``: (B, S)
        with True at padding. Returns (T, B, C) and, when asked, the weights."""
        tgt_len, bsz, _ = query.shape
        heads, dim = self.num_heads, self.head_dim

        def split(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d)
            return x.view(tgt_len, bsz, heads, dim).permute(1, 2, 0, 3)

        q = split(self.q_proj(query) * self.scaling)
        k, v = split(self.k_proj(query)), split(self.v_proj(query))
        if incremental_state is not None:
            k, v, key_padding_mask = self._extend_cache(incremental_state, k, v, key_padding_mask)
        src_len = k.size(2)
        buckets = relative_buckets(tgt_len, src_len, self.max_distance, query.device)
        index = buckets.expand(bsz, heads, tgt_len, src_len)
        logits = torch.matmul(q, k.transpose(-1, -2))
        logits = logits + torch.matmul(q, self.rel_keys.t()).gather(-1, index)
        if attn_mask is not None:
            logits = logits + attn_mask.to(logits.dtype)
        if key_padding_mask is not None:
            pad = key_padding_mask.to(torch.bool)[:, None, None, :]
            logits = logits.masked_fill(pad, float("-inf"))
        probs = F.softmax(logits.float(), dim=-1).type_as(logits)
        dropped = self.dropout_module(probs)
        out = torch.matmul(dropped, v)
        if self.rel_values is not None:
            per_bucket = dropped.new_zeros(bsz, heads, tgt_len, self.rel_keys.size(0))
            per_bucket.scatter_add_(-1, index, dropped)
            out = out + torch.matmul(per_bucket, self.rel_values)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, heads * dim))
        weights: Tensor | None = None
        if need_weights or need_head_weights:
            weights = probs.transpose(0, 1) if need_head_weights else probs.mean(dim=1)
        return out, weights

    def _extend_cache(
        self,
        incremental_state: dict[str, dict[str, Tensor | None]],
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Appends this step's keys/values to the cache (fairseq's buffer layout: (B, H, S, d),
        which ``reorder_incremental_state`` already reorders under beam search)."""
        saved = self._get_input_buffer(incremental_state)
        prev_k, prev_v = saved.get("prev_key"), saved.get("prev_value")
        prev_mask = saved.get("prev_key_padding_mask")
        if prev_k is not None and prev_v is not None:
            if key_padding_mask is not None or prev_mask is not None:
                old = (
                    prev_mask
                    if prev_mask is not None
                    else k.new_zeros(k.size(0), prev_k.size(2), dtype=torch.bool)
                )
                new = (
                    key_padding_mask
                    if key_padding_mask is not None
                    else k.new_zeros(k.size(0), k.size(2), dtype=torch.bool)
                )
                key_padding_mask = torch.cat([old.to(torch.bool), new.to(torch.bool)], dim=1)
            k = torch.cat([prev_k, k], dim=2)
            v = torch.cat([prev_v, v], dim=2)
        saved["prev_key"], saved["prev_value"] = k, v
        saved["prev_key_padding_mask"] = key_padding_mask
        self._set_input_buffer(incremental_state, saved)
        return k, v, key_padding_mask


class RelativePositionExtension(ModelExtension):
    """``--rpe-max-distance K``: relative self-attention in the encoder in place of absolute
    positions (NT5 §4.1); ``--rpe-decoder`` in decoder self-attention too; ``--rpe-no-values``
    keeps relative embeddings for keys only."""

    name = "rpe"
    order = 20
    ctranslate2 = None  # the converter maps Shaw et al.'s tables (ct2_spec)
    args = {
        "rpe_max_distance": (
            {"type": int, "metavar": "K", "help": "relative positions clipped at K; 0 = absolute"},
            0,
        ),
        "rpe_decoder": (
            {"action": "store_true", "help": "relative positions in decoder self-attention too"},
            False,
        ),
        "rpe_no_values": (
            {"action": "store_true", "help": "relative embeddings for keys only, not for values"},
            False,
        ),
    }

    def active(self, args: Any) -> bool:
        return int(getattr(args, "rpe_max_distance", 0) or 0) > 0 or bool(
            getattr(args, "rpe_decoder", False)
        )

    def check(self, args: Any, active: Sequence[str]) -> None:
        if getattr(args, "rpe_decoder", False) and not getattr(args, "rpe_max_distance", 0):
            raise ValueError("--rpe-decoder needs --rpe-max-distance > 0")

    def _used(self, side: str, cfg: Any) -> bool:
        return side == "encoder" or bool(getattr(cfg, "rpe_decoder", False))

    def self_attention(self, side: str, cfg: Any, embed_dim: int) -> Any:
        if not self._used(side, cfg):
            return None
        heads = cfg.encoder.attention_heads if side == "encoder" else cfg.decoder.attention_heads
        values = not getattr(cfg, "rpe_no_values", False)
        return RelativeSelfAttention(
            embed_dim, heads, cfg.rpe_max_distance, cfg.attention_dropout, values
        )

    def attach(self, side: str, stack: Any, cfg: Any) -> None:
        if self._used(side, cfg):
            stack.embed_positions = None  # NT5 §4.1: RPE replaces absolute positions

"""What the model families' presets are made of: the papers' sizes (NT5 Table 4,
Transformer-Big, pre-LN), :func:`dims`, and the fairseq architecture function of a preset. Each
family declares its own presets (:class:`~mtcore_plugins.models.extension.ModelFamily`); the
catalogue of every built-in one is :func:`mtcore_plugins.models.presets.all_presets`. Importing this
module does not import fairseq.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TRANSFORMER = "transformer"
MTCORE = "mtcore_transformer"

# NT5 Table 4: (encoder layers, encoder FFN, decoder layers, decoder FFN).
NT5_TABLE4: dict[str, tuple[int, int, int, int]] = {
    "mtcore_nt5_ntt_base": (9, 8192, 9, 8192),
    "mtcore_nt5_abci_base": (9, 16384, 9, 4096),
    "mtcore_nt5_abci_encbig": (12, 65536, 9, 8192),
    "mtcore_nt5_abci_encdeep": (18, 8192, 9, 8192),
    "mtcore_nt5_failab_encbig": (9, 61440, 9, 16384),
    "mtcore_nt5_failab_decbig": (9, 16384, 9, 61440),
}


@dataclass(frozen=True)
class Preset:
    model: str
    family: str  # the mtcore.models plugin that registers it
    settings: dict[str, Any] = field(default_factory=dict)


def dims(d: int, ffn: int, heads: int, enc: int, dec: int, **extra: Any) -> dict[str, Any]:
    """Symmetric encoder/decoder sizes plus ``extra`` settings."""
    return {
        "encoder_embed_dim": d,
        "encoder_ffn_embed_dim": ffn,
        "encoder_attention_heads": heads,
        "encoder_layers": enc,
        "decoder_embed_dim": d,
        "decoder_ffn_embed_dim": ffn,
        "decoder_attention_heads": heads,
        "decoder_layers": dec,
        **extra,
    }


# Transformer-Big (Vaswani et al.): d 1024, FFN 4096, 16 heads, 6+6 layers, Post-LN.
BIG = {"d": 1024, "ffn": 4096, "heads": 16}
# Tiny twins: d 64, 4 heads; FFN keeps the paper's ratio to d where it is the point (wide).
TINY = {"d": 64, "heads": 4}
PRE_LN = {"encoder_normalize_before": True, "decoder_normalize_before": True}
NT5_EXT = {"b2t": True, "rpe_max_distance": 16}  # NT5 §4.1: B2T, encoder RPE with k = 16


def architecture(model: str, settings: dict[str, Any]) -> Any:
    """The fairseq architecture function of ``model`` that fills what the command line left
    unset with ``settings``, then the model's own defaults."""

    def apply(args: Any) -> None:
        for key, value in settings.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
        if model == MTCORE:
            from mtcore_plugins.models.model import mtcore_base_architecture

            mtcore_base_architecture(args)
        else:
            from fairseq.models.transformer.transformer_legacy import base_architecture

            base_architecture(args)

    return apply

"""The NT5 Table 4 presets have the paper's sizes (counted on the meta device: no memory)."""

from __future__ import annotations

import argparse

import pytest

from mtcore.contracts.registry import load_registry

# NT5 Table 4, "#Params." column, with the paper's rounding.
TABLE4_PARAMS = {
    "mtcore_nt5_ntt_base": 547e6,
    "mtcore_nt5_abci_base": 622e6,
    "mtcore_nt5_abci_encbig": 2.0e9,
    "mtcore_nt5_abci_encdeep": 736e6,
    "mtcore_nt5_failab_encbig": 1.7e9,
    "mtcore_nt5_failab_decbig": 1.7e9,
}


@pytest.fixture(scope="module")
def dictionary():
    pytest.importorskip("fairseq")
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(64_000 - len(d)):  # NT5 §3.2: 64,000 subwords for the final models
        d.add_symbol(f"piece{i}")
    return d


@pytest.mark.parametrize(("arch", "expected"), TABLE4_PARAMS.items())
def test_table4_parameter_counts(dictionary, arch, expected):
    import torch
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from fairseq.models.transformer import TransformerModel

    load_registry().load("models", "transformer_presets").from_dict({}).register()
    args = argparse.Namespace(share_decoder_input_output_embed=True, share_all_embeddings=False)
    ARCH_CONFIG_REGISTRY[arch](args)

    class Task:
        source_dictionary = target_dictionary = dictionary

    with torch.device("meta"):
        model = TransformerModel.build_model(args, Task())
    params = sum(p.numel() for p in model.parameters())
    precision = 0.5e6 if expected < 1e9 else 0.05e9  # the table rounds to 1M or 0.1B
    assert abs(params - expected) <= precision, params
    assert model.encoder.embed_tokens is not model.decoder.embed_tokens

"""Real data from ``../shared/data`` and the recipe documents tests build on it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

SHARED = ROOT.parent / "shared" / "data"
"""The data folder beside the repository (``../shared/data``)."""
ENJA = SHARED / "en-ja" / "odashi+small_parallel_enja"


def real_slice(
    dest: Path, split: str, n: int, langs: tuple[str, ...] = ("en", "ja")
) -> dict[str, Path]:
    """The first ``n`` lines of small_parallel_enja's ``split`` copied into ``dest``."""
    if not ENJA.exists():
        if os.environ.get("CI"):  # CI always has ../shared: a missing path is a bug, not a skip
            pytest.fail(f"real data not found at {ENJA}")
        pytest.skip(f"real data not found at {ENJA}")
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for lang in langs:
        with open(ENJA / f"{split}.{lang}", encoding="utf-8") as src:
            lines = [next(src) for _ in range(n)]
        out[lang] = dest / f"{split}.{lang}"
        out[lang].write_text("".join(lines), encoding="utf-8")
    return out


def local_data(files: dict[str, Path] | dict[str, str]) -> dict[str, Any]:
    """A recipe's ``data`` section reading ``files`` (lang -> path) as the corpus ``bitext``."""
    return {"bitext": {"source": "local", "files": {k: str(v) for k, v in files.items()}}}


def clean_split_recipe(
    name: str, files: dict[str, Path] | dict[str, str], filters: list[dict[str, Any]], held_out: int
) -> dict[str, Any]:
    """data ``bitext`` -> ``clean`` with ``filters`` -> ``split`` holding out ``held_out`` pairs
    for valid and for test; one worker. Tests add or change steps on the returned document."""
    return {
        "name": name,
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": local_data(files),
        "steps": {
            "clean": {"kind": "clean", "inputs": {"corpus": "bitext"}, "filters": filters},
            "split": {
                "kind": "split",
                "inputs": {"corpus": "clean"},
                "valid_size": held_out,
                "test_size": held_out,
            },
        },
    }


def tiny_bert(where: Path, units: list[str], hidden: int, positions: int) -> tuple[Any, Any]:
    """(tokenizer, model): a seeded, untrained one-layer BERT masked LM whose vocabulary is
    ``units`` (words, or characters), its ``vocab.txt`` written into ``where``."""
    transformers = pytest.importorskip("transformers")
    import torch

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    where.mkdir(parents=True, exist_ok=True)
    (where / "vocab.txt").write_text("\n".join(special + units) + "\n", encoding="utf-8")
    config = transformers.BertConfig(
        vocab_size=len(special) + len(units),
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=positions,
    )
    torch.manual_seed(0)
    tokenizer = transformers.BertTokenizer(str(where / "vocab.txt"))
    return tokenizer, transformers.BertForMaskedLM(config)

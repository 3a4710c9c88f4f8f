"""The CUDA paths (issue 26), on real en-ja slices with micro models: fp16 and bf16 training
through the train step, R-Drop, translation with beam search and with sampling, a weighted
ensemble and a right-to-left model force-decoded as they search, and incremental decoding of
relative positions, each on the GPU. Marked ``gpu``: skipped where torch sees no CUDA device
(CI, the 2-core machine); run on a GPU machine with ``pytest -m gpu`` (docs/scale.md, "Training
on GPUs")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from mtcore.contracts.step import Artifact
from tests.plugins.steps.test_decoding import (
    CAPPED,
    MICRO,
    build_setup,
    check_against_search,
    loaded,
    texts,
    train,
    translate,
)
from tests.plugins.steps.test_fairseq_steps import DATA

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device"),
    pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA}"),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """test_decoding's corpora, SentencePiece model, binarized data and micro model, trained
    here on the GPU (fp32)."""
    return build_setup(tmp_path_factory.mktemp("gpu"))


def updates(model: Path) -> list[dict[str, Any]]:
    """The per-update JSON records of a train step's log (``log_interval: 1``)."""
    found = []
    for line in (model / "train.log").read_text(encoding="utf-8").splitlines():
        if "| train_inner |" in line:
            found.append(json.loads(line.split("| train_inner | ", 1)[1]))
    return found


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_training_through_the_train_step(
    setup: dict[str, Path], tmp_path: Path, precision: str
) -> None:
    """fairseq's --fp16 (loss scaling) and --bf16 through the recipe's train step: every update
    has a finite loss, the averaged checkpoint loads and translates every line on the GPU
    (what a 5-update model writes is not checked: it may end every output at once)."""
    model = train(tmp_path / precision, {**MICRO, "precision": precision}, setup["data_enja"])
    records = updates(model)
    assert len(records) == MICRO["max_update"]
    assert all(float(r["loss"]) == float(r["loss"]) < 1e3 for r in records), records
    meta = Artifact.open(model).meta
    assert meta["arch"] == MICRO["arch"]
    _, hyps, _ = translate({**setup, "model": model}, tmp_path / "hyp", beam=3, **CAPPED)
    assert len(hyps) == 49


def test_rdrop_trains_on_the_gpu(setup: dict[str, Path], tmp_path: Path) -> None:
    """The R-Drop criterion (HW-TSC §3.2) in fp16: its KL term is logged and finite."""
    settings = {**MICRO, "precision": "fp16", "models": ["rdrop", "transformer_presets"]}
    settings |= {"criterion": "mtcore_rdrop", "criterion_args": {"alpha": 5}}
    model = train(tmp_path / "rdrop", settings, setup["data_enja"])
    records = updates(model)
    assert records and all(0 <= float(r["kl_loss"]) < 1e3 for r in records), records


def test_beam_search_on_the_gpu_gives_the_cpus_translations(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """The same model and settings on CUDA and on the CPU (fp32): the same n-best texts, line
    for line, apart from near ties (at most a tenth of the lines)."""
    settings = {"beam": 4, "nbest": 2, **CAPPED}
    _, gpu, gpu_entries = translate(setup, tmp_path / "cuda", device="cuda", **settings)
    _, cpu, cpu_entries = translate(setup, tmp_path / "cpu", device="cpu", **settings)
    assert len(gpu) == len(cpu) == 49
    same = sum(a == b for a, b in zip(texts(gpu_entries), texts(cpu_entries), strict=True))
    assert same >= 0.9 * len(cpu), (same, len(cpu))


def test_sampling_on_the_gpu_is_seeded(setup: dict[str, Path], tmp_path: Path) -> None:
    """Sampling on CUDA: the same seed draws the same samples, another seed others."""
    settings = {"sampling": True, "nbest": 3, "beam": 3, "device": "cuda", **CAPPED}
    _, first, a = translate(setup, tmp_path / "a", seed=3, **settings)
    _, again, b = translate(setup, tmp_path / "b", seed=3, **settings)
    _, other, c = translate(setup, tmp_path / "c", seed=4, **settings)
    assert first == again and texts(a) == texts(b)
    assert texts(a) != texts(c)


def test_ensembles_and_r2l_force_decode_as_they_search_on_the_gpu(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    """NT5 §4.4's weighted ensemble of two architectures and a right-to-left model, loaded on
    CUDA: force decoding the search's own hypotheses gives the search's scores."""
    tiny = train(
        tmp_path / "tiny", {**MICRO, "arch": "mtcore_transformer_tiny"}, setup["data_enja"]
    )
    r2l = train(tmp_path / "r2l", {**MICRO, "direction": "r2l"}, setup["data_enja"])
    ensemble = {"model": setup["model"], "model2": tiny}
    for models, weights in (
        ({"model": setup["model"]}, None),
        (ensemble, {"model": 1.0, "model2": 3.0}),
        ({"model": r2l}, None),
    ):
        extra = {"weights": weights} if weights else {}
        translator, decoder = loaded(setup, models=models, device="cuda", **extra)
        assert next(translator.models[0].parameters()).is_cuda
        assert check_against_search(translator, decoder) == 30 * 4


def test_relative_positions_decode_incrementally_on_the_gpu() -> None:
    """NT5 §4.1's relative self-attention: step-by-step decoding with its cached state equals
    the full causal pass on CUDA, in fp32 and in fp16."""
    from mtcore_plugins.models.rpe import RelativeSelfAttention

    torch.manual_seed(1)
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
        attn = RelativeSelfAttention(64, 4, max_distance=8).cuda().to(dtype).eval()
        x = torch.randn(12, 3, 64, device="cuda", dtype=dtype)
        mask = torch.triu(torch.full((12, 12), float("-inf"), device="cuda", dtype=dtype), 1)
        with torch.no_grad():
            full, _ = attn(x, x, x, attn_mask=mask)
            state: dict[str, Any] = {}
            steps = [attn(x[i : i + 1], None, None, incremental_state=state)[0] for i in range(12)]
        assert torch.allclose(torch.cat(steps), full, atol=tolerance), dtype

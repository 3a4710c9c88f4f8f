"""Training and decoding speed of the papers' architectures on one CUDA GPU (issue 26).

Training: each technique is built through its own model plugin, at one width for all
(d 1024, FFN 4096, 16 heads, 6+6 layers, a 32k vocabulary; pre-LN 25-6 with its 25 encoder
layers), and trained on the same random batches (256 pairs of 32 tokens a side) with Adam
under ``torch.autocast`` in fp16 (with loss scaling) and in bf16, as fairseq's ``--amp`` does.
It prints target tokens per second (after warm-up updates) and peak GPU memory, each against
the vanilla Transformer of the same run. R-Drop is vanilla with the ``mtcore_rdrop`` criterion
(two passes of each batch). Random batches: the arithmetic of a real batch of that shape.

Decoding: the vanilla model (random weights) in fp16 and bf16 with fairseq's beam search (beam
5, batches of 128 sources of 30 tokens, every output run to its cap of 40 tokens, as a model
with random weights never ends early): sentences and output tokens per second. CTranslate2 is
reported when it imports and sees a GPU.

    python bench/gpu_speed.py [--updates 10] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch


def width() -> dict[str, Any]:
    """NT5's initial model (Vaswani et al.'s big with FFN 4096), its sizes only."""
    from mtcore_plugins.models.presets import PRESETS

    big = PRESETS["mtcore_transformer_big_ffn4096"]
    return {k: v for k, v in big.items() if k.endswith(("_dim", "_heads", "_layers"))}


# technique -> (tiny preset that wires its plugin, settings over width(), criterion)
VARIANTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "vanilla": ("mtcore_xiaomi_big_tiny", {}, "ls"),
    "B2T (NT5 §4.1)": ("mtcore_nt5_b2t_tiny", {}, "ls"),
    "RPE (NT5 §4.1)": ("mtcore_nt5_rpe_tiny", {}, "ls"),
    "adapters (Yishu)": ("mtcore_yishu_12_6_adapters_tiny", {}, "ls"),
    "DLCL (Xiaomi §3.1)": ("mtcore_xiaomi_dlcl_big_tiny", {}, "ls"),
    "pre-LN 25-6 (HW-TSC §3.1)": ("mtcore_hwtsc_deep_25_6_tiny", {"encoder_layers": 25}, "ls"),
    "Evolved (Xiaomi §3.1)": ("mtcore_xiaomi_evolved_tiny", {}, "ls"),
    "R-Drop (HW-TSC §3.2)": ("mtcore_xiaomi_big_tiny", {}, "rdrop"),
}
FAMILIES = ["transformer_presets", "b2t", "rpe", "adapters", "dlcl", "evolved", "rdrop"]
VOCAB, PAIRS, LENGTH = 32000, 256, 32


class Task:
    """What build_model and the criteria read from a translation task."""

    def __init__(self, dictionary: Any) -> None:
        self.source_dictionary = self.target_dictionary = dictionary
        self.cfg = argparse.Namespace(source_lang="en", target_lang="ja")


def dictionary() -> Any:
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(VOCAB - len(d)):
        d.add_symbol(f"w{i}")
    return d


def build(preset: str, settings: dict[str, Any], task: Task) -> Any:
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    wanted = {**width(), **settings}
    args = argparse.Namespace(share_all_embeddings=True, dropout=0.1, **wanted)
    ARCH_CONFIG_REGISTRY[preset](args)
    vars(args).update(wanted)  # the width wins over the tiny preset's own sizes
    return ARCH_MODEL_REGISTRY[preset].build_model(args, task)


def batches(d: Any, n: int) -> list[dict[str, Any]]:
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(d.nspecial, len(d), (PAIRS, LENGTH), generator=generator)
        tgt = torch.randint(d.nspecial, len(d), (PAIRS, LENGTH), generator=generator)
        prev = torch.cat([torch.full((PAIRS, 1), d.eos()), tgt[:, :-1]], dim=1)
        out.append(
            {
                "net_input": {
                    "src_tokens": src.cuda(),
                    "src_lengths": torch.full((PAIRS,), LENGTH).cuda(),
                    "prev_output_tokens": prev.cuda(),
                },
                "target": tgt.cuda(),
                "ntokens": PAIRS * LENGTH,
                "nsentences": PAIRS,
            }
        )
    return out


def criterion(kind: str, task: Task) -> Any:
    from fairseq.criterions.label_smoothed_cross_entropy import (
        LabelSmoothedCrossEntropyCriterion,
    )

    from mtcore_plugins.models.rdrop import RDropCriterion

    if kind == "rdrop":
        return RDropCriterion(task, False, label_smoothing=0.1, alpha=5.0)
    return LabelSmoothedCrossEntropyCriterion(task, False, label_smoothing=0.1)


def train_speed(name: str, dtype: torch.dtype, updates: int, task: Task) -> dict[str, Any]:
    preset, settings, kind = VARIANTS[name]
    torch.manual_seed(0)
    model = build(preset, settings, task).cuda().train()
    loss_fn = criterion(kind, task)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    data = batches(task.target_dictionary, 4)
    torch.cuda.reset_peak_memory_stats()
    warm = 3
    for step in range(warm + updates):
        if step == warm:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=dtype):
            loss, _, _ = loss_fn(model, data[step % len(data)])
            loss = loss / (PAIRS * LENGTH)  # a sum over the tokens: per token, as fairseq steps
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {
        "technique": name,
        "dtype": str(dtype).removeprefix("torch."),
        "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "tokens_per_s": round(updates * PAIRS * LENGTH / seconds),
        "peak_GiB": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "loss": round(float(loss), 3),
    }
    del model, optimizer, data
    torch.cuda.empty_cache()
    return result


def decode_speed(dtype: torch.dtype, task: Task, rounds: int = 4) -> dict[str, Any]:
    from fairseq.sequence_generator import SequenceGenerator

    d = task.target_dictionary
    torch.manual_seed(0)
    model = build("mtcore_xiaomi_big_tiny", {}, task).cuda().to(dtype).eval()
    generator = SequenceGenerator([model], d, beam_size=5, max_len_a=0, max_len_b=40)
    src = torch.randint(d.nspecial, len(d), (128, 30), generator=torch.Generator().manual_seed(1))
    sample = {"net_input": {"src_tokens": src.cuda(), "src_lengths": torch.full((128,), 30).cuda()}}
    with torch.no_grad():
        generator.generate([model], sample)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        produced = 0
        for _ in range(rounds):
            hypos = generator.generate([model], sample)
            produced += sum(len(h[0]["tokens"]) for h in hypos)
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "decoder": "fairseq beam 5",
        "dtype": str(dtype).removeprefix("torch."),
        "sentences_per_s": round(rounds * 128 / seconds, 1),
        "output_tokens_per_s": round(produced / seconds),
    }


def ctranslate2_note() -> str:
    try:
        import ctranslate2
    except Exception as error:  # any import failure is the finding
        return f"CTranslate2 not measured: it does not import here ({error})"
    count = ctranslate2.get_cuda_device_count()
    if not count:
        return "CTranslate2 not measured: it imports but sees no CUDA device"
    return f"CTranslate2 {ctranslate2.__version__} sees {count} GPU(s) (not measured here)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=10, help="timed updates per model")
    parser.add_argument("--only", nargs="*", help="techniques to run (default: all)")
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    from mtcore.contracts.registry import load_registry

    registry = load_registry()
    for family in FAMILIES:
        registry.load("models", family).from_dict({}).register()
    task = Task(dictionary())
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        base = None
        for name in args.only or VARIANTS:
            row = train_speed(name, dtype, args.updates, task)
            base = base or row
            row["speed_vs_vanilla"] = round(row["tokens_per_s"] / base["tokens_per_s"], 2)
            row["memory_vs_vanilla"] = round(row["peak_GiB"] / base["peak_GiB"], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    decoding = [decode_speed(dtype, task) for dtype in (torch.float16, torch.bfloat16)]
    for row in decoding:
        print(json.dumps(row), flush=True)
    note = ctranslate2_note()
    print(note)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump({"training": rows, "decoding": decoding, "ctranslate2": note}, out, indent=1)


if __name__ == "__main__":
    main()

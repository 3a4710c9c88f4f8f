"""Training speed of each mtcore architecture against the vanilla fairseq Transformer of the
same size, on the same real batches, in one run.

Trains (forward, backward, Adam step) every tiny ``mtcore_transformer`` preset and its vanilla
twin (fairseq's ``transformer`` with the same widths, layer counts and LayerNorm placement) on
SentencePiece-encoded small_parallel_enja batches (short to long), alternating the two update by
update so that load from other processes on a shared machine hits both alike, and prints target
tokens/s from the fastest of ``--rounds`` updates on each batch, and the ratio. R-Drop is
measured as a criterion on the vanilla model (it runs every batch twice).

    OMP_NUM_THREADS=2 .venv/bin/python bench/model_speed.py [--rounds 5] [--batches 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1].parent / "shared/data/en-ja/odashi+small_parallel_enja"
# Targets on CPU from the task: B2T within 5 % of vanilla, adapters within 10 %, RPE within 30 %.
TARGETS = {"b2t": 0.95, "adapters": 0.90, "rpe": 0.70}
EXTENSION_KEYS = {
    "b2t",
    "rpe_max_distance",
    "adapter_dim",
    "dlcl",
    "cell",
    "adapters_only",
}
CASES: list[tuple[str, str, dict[str, Any], str]] = [
    # (label, arch, extra settings, target key)
    ("B2T", "mtcore_nt5_b2t_tiny", {}, "b2t"),
    ("RPE (encoder, k=16)", "mtcore_nt5_rpe_tiny", {}, "rpe"),
    ("B2T + RPE (NT5)", "mtcore_nt5_b2t_rpe_tiny", {}, ""),
    ("adapters, full model", "mtcore_yishu_12_6_adapters_tiny", {}, "adapters"),
    ("adapters only", "mtcore_yishu_12_6_adapters_tiny", {"adapters_only": True}, "adapters"),
    # Yishu's bottleneck equals its FFN width (4096, 8 x d): each adapter costs about one more
    # FFN. A bottleneck of d (Bapna & Firat's smaller settings) for comparison.
    (
        "adapters b=d, full model",
        "mtcore_yishu_12_6_adapters_tiny",
        {"adapter_dim": 64},
        "adapters",
    ),
    ("DLCL (1-1)", "mtcore_xiaomi_dlcl_big_tiny", {}, ""),
    ("DLCL (2-2)", "mtcore_xiaomi_dlcl_deep_tiny", {}, ""),
    ("Evolved (1-2 cells)", "mtcore_xiaomi_evolved_tiny", {}, ""),
]


def make_batches(work: Path, lines: int, max_tokens: int) -> tuple[Any, list[dict[str, Any]]]:
    """A joint SentencePiece vocabulary, a fairseq dictionary and length-sorted batches."""
    import sentencepiece as spm
    import torch
    from fairseq.data import Dictionary, data_utils

    pairs = []
    with (
        open(DATA / "train.en", encoding="utf-8") as en,
        open(DATA / "train.ja", encoding="utf-8") as ja,
    ):
        for _, s, t in zip(range(lines), en, ja, strict=False):
            pairs.append((s.strip(), t.strip()))
    text = work / "text"
    text.write_text("".join(f"{s}\n{t}\n" for s, t in pairs), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(work / "spm"), vocab_size=2000, minloglevel=2
    )
    processor = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    dictionary = Dictionary()
    for i in range(processor.get_piece_size()):
        dictionary.add_symbol(processor.id_to_piece(i))
    encoded = [
        tuple(dictionary.encode_line(" ".join(p), add_if_not_exist=False) for p in both)
        for both in zip(
            processor.encode([s for s, _ in pairs], out_type=str),
            processor.encode([t for _, t in pairs], out_type=str),
            strict=True,
        )
    ]
    encoded.sort(key=lambda st: (len(st[1]), len(st[0])))
    batches: list[dict[str, Any]] = []
    current: list[Any] = []
    for src, tgt in encoded:
        if current and (len(current) + 1) * max(len(tgt), len(src)) > max_tokens:
            batches.append(collate(current, dictionary, data_utils, torch))
            current = []
        current.append((src, tgt))
    if current:
        batches.append(collate(current, dictionary, data_utils, torch))
    return dictionary, batches


def collate(pairs: list[Any], dictionary: Any, data_utils: Any, torch: Any) -> dict[str, Any]:
    pad, eos = dictionary.pad(), dictionary.eos()
    src = data_utils.collate_tokens([s for s, _ in pairs], pad, eos, left_pad=True)
    tgt = data_utils.collate_tokens([t for _, t in pairs], pad, eos, left_pad=False)
    prev = data_utils.collate_tokens(
        [t for _, t in pairs], pad, eos, left_pad=False, move_eos_to_beginning=True
    )
    return {
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.tensor([len(s) for s, _ in pairs]),
            "prev_output_tokens": prev,
        },
        "target": tgt,
        "ntokens": int(tgt.ne(pad).sum()),
    }


class Task:
    def __init__(self, dictionary: Any) -> None:
        self.source_dictionary = self.target_dictionary = dictionary
        self.cfg = argparse.Namespace(source_lang="en", target_lang="ja")


def trainer(
    arch: str, settings: dict[str, Any], task: Task, criterion_name: str
) -> Callable[[Any], float]:
    """A function that trains on the given batches and returns target tokens per second."""
    import torch
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from mtcore_plugins.models.rdrop import RDropCriterion

    args = argparse.Namespace(share_all_embeddings=True, dropout=0.1, **settings)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(1)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task).train()
    if criterion_name == "rdrop":
        criterion: Any = RDropCriterion(task, False, 0.1, alpha=5.0)
    else:
        criterion = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-4, betas=(0.9, 0.98))

    def step(sample: dict[str, Any]) -> float:
        """One update; returns its wall time."""
        started = time.perf_counter()
        loss, _, _ = criterion(model, sample)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return time.perf_counter() - started

    return step


def vanilla_settings(arch: str) -> tuple[str, dict[str, Any]]:
    """fairseq's ``transformer`` with the preset's sizes and LayerNorm placement."""
    from mtcore_plugins.models.presets import all_presets

    preset = all_presets()[arch]
    settings = {k: v for k, v in preset.settings.items() if k not in EXTENSION_KEYS}
    return "transformer", settings


def measure(
    base: Callable[[Any], float],
    variant: Callable[[Any], float],
    batches: list[Any],
    rounds: int,
) -> tuple[float, float]:
    """Tokens/s of each model from the fastest of ``rounds`` updates on every batch. The two
    models alternate update by update on the same batch, and the minimum drops the updates that
    a burst of load from other processes slowed down (on a shared machine a contended update
    can take ten times as long)."""
    for sample in batches[:2]:  # warm-up: allocations and first-call costs
        base(sample), variant(sample)
    best_base = [float("inf")] * len(batches)
    best_variant = [float("inf")] * len(batches)
    for r in range(rounds):
        for i, sample in enumerate(batches):
            if (r + i) % 2:  # alternate which goes first
                best_variant[i] = min(best_variant[i], variant(sample))
                best_base[i] = min(best_base[i], base(sample))
            else:
                best_base[i] = min(best_base[i], base(sample))
                best_variant[i] = min(best_variant[i], variant(sample))
    tokens = sum(sample["ntokens"] for sample in batches)
    return tokens / sum(best_base), tokens / sum(best_variant)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=12, help="batches, spread over lengths")
    parser.add_argument("--lines", type=int, default=4000, help="training pairs read")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    options = parser.parse_args(argv)
    if not DATA.exists():
        sys.exit(f"real data not found at {DATA}")
    import torch

    from mtcore_plugins.models.presets import register_everything

    torch.set_num_threads(options.threads)
    register_everything()
    with tempfile.TemporaryDirectory() as tmp:
        dictionary, batches = make_batches(Path(tmp), options.lines, options.max_tokens)
    task = Task(dictionary)
    step = max(1, len(batches) // options.batches)
    sample = batches[::step][: options.batches]  # short to long sentences
    print(
        f"threads={options.threads} batches={len(batches)} "
        f"rounds={options.rounds} measured batches={len(sample)}"
    )
    print(f"{'architecture':28} {'vanilla tok/s':>14} {'variant tok/s':>14} {'ratio':>7}  target")
    rows: list[tuple[str, Callable[[Any], float], Callable[[Any], float], str]] = []
    for label, arch, extra, target in CASES:
        model, settings = vanilla_settings(arch)
        rows.append(
            (
                label,
                trainer(model, settings, task, "ls"),
                trainer(arch, extra, task, "ls"),
                target,
            )
        )
    rows.append(
        (
            "R-Drop criterion (alpha 5)",
            trainer("mtcore_xiaomi_big_tiny", {}, task, "ls"),
            trainer("mtcore_xiaomi_big_tiny", {}, task, "rdrop"),
            "",
        )
    )
    for label, base, variant, target in rows:
        base_speed, variant_speed = measure(base, variant, sample, options.rounds)
        ratio = variant_speed / base_speed
        verdict = ""
        if target:
            verdict = f">= {TARGETS[target]:.2f} " + (
                "ok" if ratio >= TARGETS[target] else "MISSED"
            )
        print(f"{label:28} {base_speed:14.0f} {variant_speed:14.0f} {ratio:7.3f}  {verdict}")


if __name__ == "__main__":
    main()

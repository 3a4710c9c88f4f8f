"""Back-translation of 100,000 real monolingual lines through NT5's own BT step, decoded by the
fairseq backend and by CTranslate2 (float32 and int8), on the same model (issue 25).

It runs ``recipes/nt5.yaml`` (default profile, ``cpu``) in its workdir (``work/nt5``, what
``make nt5`` builds; missing steps are built first) with ``--set``s that feed the recipe's
``bt_hyp_enja`` step (Japanese monolingual text -> English with ``init_jaen``, §3.2) a
monolingual data entry of ``--lines`` lines, and set its ``backend``/``compute_type``; the same
settings on ``hyp_baseline_jaen`` give that model's test-set score through each backend (its
``eval_baseline_jaen`` step: BLEU as WMT22 reported it, chrF). Nothing else of the recipe
changes, so the step decodes with the profile's own search (greedy, batch 128, 2 threads).

The monolingual lines are real Japanese: every distinct Japanese line of ../shared/data's
WMT21-23 En-Ja/Ja-En test sets (sources, references, every system output: raw, unsegmented
news text), then small_parallel_enja's train.ja until ``--lines``. Printed per backend: the BT
step's wall time (its manifest), sentences/s and the ratio to fairseq, lines whose translation
equals fairseq's, empty outputs, and the test-set scores.

    .venv/bin/python bench/bt_backends.py [--lines 100000] [--workdir work/nt5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared/data"
BACKENDS = {"fairseq": ("fairseq", "default"), "ct2": ("ctranslate2", "float32"),
            "ct2_int8": ("ctranslate2", "int8")}  # fmt: skip
RECIPE = ROOT / "recipes/nt5.yaml"


def monolingual(path: Path, lines: int) -> dict[str, int]:
    """Writes ``lines`` Japanese lines; returns how many came from each source."""
    seen: dict[str, None] = {}
    for pair in ("en-ja", "ja-en"):
        for file in sorted((SHARED / pair).glob("wmt-conference+*/txt/*/*")):
            if file.suffix == ".ja":
                for line in file.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        seen.setdefault(line.strip(), None)
    news = list(seen)[:lines]
    fill = (SHARED / "en-ja/odashi+small_parallel_enja/train.ja").read_text(encoding="utf-8")
    spare = fill.splitlines()
    rows = news + [spare[i % len(spare)] for i in range(lines - len(news))]
    path.write_text("".join(line + "\n" for line in rows), encoding="utf-8")
    return {"wmt": len(news), "small_parallel_enja": len(rows) - len(news)}


def settings(mono: Path, backend: str, compute: str) -> list[str]:
    found = [
        f"data.bench_mono={{source: local, files: {{ja: '{mono}'}}}}",
        "steps.bt_hyp_enja.inputs.corpus=bench_mono",
    ]
    for step in ("bt_hyp_enja", "hyp_baseline_jaen"):
        found += [f"steps.{step}.backend={backend}", f"steps.{step}.compute_type={compute}"]
    return found


def step_dirs(workdir: Path, sets: list[str], names: list[str]) -> dict[str, Path]:
    """The output directories of steps ``names`` in the plan these ``sets`` give."""
    from mtcore.contracts.registry import load_registry
    from mtcore.recipe.load import load_recipe
    from mtcore.recipe.plan import make_plan, step_dir

    registry = load_registry()
    plan = make_plan(load_recipe(RECIPE, registry, None, sets), registry)
    return {p.spec.id: step_dir(workdir, p) for p in plan if p.spec.id in names}


def read(folder: Path, name: str) -> Any:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def hyp_lines(folder: Path) -> list[str]:
    (found,) = folder.glob("hyp/hyp.*")
    return found.read_text(encoding="utf-8").split("\n")[:-1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, default=ROOT / "work/nt5")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    mono = args.workdir.resolve() / f"bench_mono.{args.lines}.ja"
    sources = monolingual(mono, args.lines)
    run = [sys.executable, "-m", "mtcore.cli", "run", str(RECIPE), "-w", str(args.workdir)]
    found = {}
    for name, (backend, compute) in BACKENDS.items():
        sets = settings(mono, backend, compute)
        flags = [part for value in sets for part in ("--set", value)]
        for until in ("bt_hyp_enja", "eval_baseline_jaen"):
            subprocess.run([*run, *flags, "--until", until, "-q"], check=True)
        found[name] = step_dirs(args.workdir, sets, ["bt_hyp_enja", "eval_baseline_jaen"])
    print(
        f"{args.lines} Japanese lines ({sources['wmt']} distinct WMT21-23 lines, "
        f"{sources['small_parallel_enja']} small_parallel_enja train.ja) -> English by NT5's "
        "bt_hyp_enja step (cpu profile: init_jaen, greedy, batch 128, 2 threads)"
    )
    base = hyp_lines(found["fairseq"]["bt_hyp_enja"])
    base_seconds = 0.0
    for name, dirs in found.items():
        seconds = float(read(dirs["bt_hyp_enja"], "manifest.json")["seconds"])
        base_seconds = base_seconds or seconds
        lines = hyp_lines(dirs["bt_hyp_enja"])
        same = sum(a == b for a, b in zip(lines, base, strict=True)) / len(lines)
        metrics = read(dirs["eval_baseline_jaen"], "manifest.json")["metrics"]
        scores = "  ".join(
            f"{key} {value['score']:.2f}"
            for key, value in metrics.items()
            if isinstance(value, dict) and "score" in value
        )
        empty = sum(not line for line in lines)
        print(
            f"{name:9s} BT {seconds:7.1f} s {len(lines) / seconds:7.1f} sent/s "
            f"({base_seconds / seconds:.2f}x)  same as fairseq {same:6.1%}  empty {empty}  "
            f"test (ja-en): {scores}"
        )


if __name__ == "__main__":
    main()

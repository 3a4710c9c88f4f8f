"""A user of ``mtcore export --format ctranslate2`` with ctranslate2, sentencepiece and sacremoses
only: it redoes the stage's path from ``mtcore_export.json`` (truecasing, the model, the
post-processing it can) on the stage's test lines of a finished run and prints the shares of
lines identical to the run's truecasing, to the run's decode, and to the stage's output
(what ``mtcore translate`` writes).

    python bench/ct2_client.py EXPORT_DIR WORKDIR
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def step_dir(workdir: Path, step: str) -> Path:
    (found,) = [p for p in (workdir / "steps").iterdir() if p.name.rsplit("-", 1)[0] == step]
    return found


def column(folder: Path, lang: str) -> list[str]:
    (path,) = folder.glob(f"*.{lang}")  # corpus.en, hyp.ja
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def translate(export: Path, info: dict, pieces: list[list[str]]) -> list[list[str]]:
    import ctranslate2

    settings = dict(info["client"]["translate_batch"])
    a, b, prefix = (
        settings.pop("max_len_a"),
        settings.pop("max_len_b"),
        settings.pop("target_prefix"),
    )
    source_max, target_max = info["positions"]["source"], info["positions"]["target"]
    model = ctranslate2.Translator(str(export), device="cpu", compute_type="default")
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(pieces):
        if p:
            pieces[i] = p = p[: source_max - 1]
            cap = min(math.floor((len(p) + 1) * a + b), target_max - 2)
            groups.setdefault(max(cap, 1), []).append(i)
    out: list[list[str]] = [[] for _ in pieces]
    for cap, rows in groups.items():
        found = model.translate_batch(
            [pieces[i] for i in rows],
            max_decoding_length=cap + len(prefix),
            target_prefix=[prefix] * len(rows) if prefix else None,
            **settings,
        )
        for i, r in zip(rows, found, strict=False):
            out[i] = r.hypotheses[0][len(prefix) :]
    return out


def post(line: str, lang: str, processors: list) -> str:
    """What sacremoses does of the stated processors: postprocess_en's unknown tokens out,
    detokenization and detruecasing; other processors have no sacremoses counterpart."""
    from sacremoses import MosesDetokenizer, MosesDetruecaser

    for name in processors:
        if (name if isinstance(name, str) else name.get("name")) == "postprocess_en":
            line = " ".join(line.replace("<unk>", " ").replace("\u2047", " ").split())
            line = MosesDetokenizer(lang=lang).detokenize(line.split())
            line = MosesDetruecaser().detruecase(line, return_str=True)
    return line


def main(export: Path, workdir: Path) -> None:
    import sentencepiece as spm
    from sacremoses import MosesTruecaser

    info = json.loads((export / "mtcore_export.json").read_text())
    src, tgt = info["src"], info["tgt"]
    before, after = info["path"]["before"], info["path"]["after"]
    first = before[0]["id"] if before else info["step"]
    manifest = json.loads((step_dir(workdir, first) / "manifest.json").read_text())
    raw = column(step_dir(workdir, manifest["inputs"]["corpus"]["step"]) / "corpus", src)
    lines = list(raw)
    for step in before:
        if step["kind"] == "truecase" and src in step.get("files", {}):
            casing = MosesTruecaser(load_from=str(export / step["files"][src]))
            lines = [casing.truecase(x, return_str=True) for x in lines]
            run = column(step_dir(workdir, step["id"]) / "corpus", src)
            same = sum(x == y for x, y in zip(lines, run, strict=False))
            print(f"{step['id']}: sacremoses truecasing identical to the run's: {same}/{len(run)}")
            lines = run  # the model's input as the run fed it, to measure the model alone
    sp = spm.SentencePieceProcessor(model_file=str(export / "spm.model"))
    hyps = [
        sp.decode(t) for t in translate(export, info, [sp.encode(x, out_type=str) for x in lines])
    ]
    run = (step_dir(workdir, info["step"]) / "hyp" / f"hyp.{tgt}").read_text().split("\n")[:-1]
    same = sum(x == y for x, y in zip(hyps, run, strict=False))
    print(
        f"{info['step']}: decode identical to the run's: {same}/{len(run)} "
        f"(recorded {info['run_check']['identical_to_run']:.1%})"
    )
    for step in after:
        hyps = [post(x, tgt, step["config"].get("processors", [])) for x in hyps]
        final = column(step_dir(workdir, step["id"]) / "corpus", tgt)
    if after:
        same = sum(x == y for x, y in zip(hyps, final, strict=False))
        print(
            f"{after[-1]['id']}: after post-processing identical to mtcore translate's: "
            f"{same}/{len(final)}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

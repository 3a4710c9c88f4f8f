"""The run page (``report.html``) and ``mtcore report``: built from the workdir alone, also during
a run; every link lands; text from the data is escaped; Chromium shows it without errors. The
page of a whole smoke run is checked in tests/e2e/test_recipes.py."""

from __future__ import annotations

import fcntl
import inspect
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.report.page import collect, line_chart, write_page
from mtcore_plugins.steps._train_log import parse_curves
from tests.support.browser import SECTIONS, view_page


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


class Parsed(HTMLParser):
    """A page as a browser parses it: its elements, their attributes and the text between
    (references resolved), and the text of its ``<style>``."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.style: list[str] = []
        self._in: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes += [(name, value or "") for name, value in attrs]
        self._in.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes += [(name, value or "") for name, value in attrs]

    def handle_endtag(self, tag: str) -> None:
        if tag in self._in:
            del self._in[len(self._in) - 1 - self._in[::-1].index(tag) :]

    def handle_data(self, data: str) -> None:
        (self.style if self._in and self._in[-1] == "style" else self.text).append(data)


# every element the page draws; a string from the data that escaped escaping would add one
PAGE_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "p", "nav",
    "a", "main", "section", "table", "tr", "th", "td", "span", "code", "ul", "li", "b", "div",
    "svg", "text", "rect", "line", "polyline", "circle",
}  # fmt: skip


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
    parsed = Parsed(text)
    assert parsed.tags <= PAGE_TAGS - {"b"}, parsed.tags - PAGE_TAGS  # no <b> of the data
    assert "<script>" not in text and "&lt;script&gt;alert(" in text
    assert HOSTILE in "".join(parsed.text)  # shown as the text it is
    assert "ファイルが見つかりません" in text and ">412 3<" in text
    assert "850 of 1,000 pairs kept (85.0 %)" in text
    assert "complete (requeued 2x)" in text  # its Slurm job was stopped twice and queued again
    assert ">train</a> (running: so far)" in text
    # the loss chart: three lines (train/loss, valid/loss, epoch/loss), train/loss at 4 updates
    assert re.search(r"train/loss @ 30: 7\.99<", text) and "train/loss @ 30: 7.995" not in text
    assert "No step has scored the system yet." in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


STYLE_BREAK = "</style><script>alert(1)</script>"
ATTRIBUTE_BREAK = '"><img src=x onerror=alert(2)>'


def hostile_workdir(work: Path) -> Path:
    """The mid-run workdir with hostile text wherever the data reaches the page: a step id
    (a table row, a link, a plan-graph box, chart titles and bar labels in SVG), a filter's
    name, the rejected pairs (corpus text, long enough to be cut into a tooltip), the recipe,
    profile and paper names, and a curve's name (an SVG legend)."""
    workdir_mid_run(work)
    plan = json.loads((work / "plan.json").read_text(encoding="utf-8"))
    plan.update(recipe=STYLE_BREAK, profile=ATTRIBUTE_BREAK, paper=STYLE_BREAK, ablated=[HOSTILE])
    plan["steps"][1]["id"] = STYLE_BREAK + ATTRIBUTE_BREAK  # the training: curves, SVG titles
    (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    clean = work / "steps" / "clean-aaa"
    manifest = json.loads((clean / "manifest.json").read_text(encoding="utf-8"))
    manifest["counts"][f"dropped.{ATTRIBUTE_BREAK}"] = 3
    manifest["counts"]["pairs_out"] -= 3
    (clean / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (clean / "rejects" / "length.tsv").write_text(
        f"{STYLE_BREAK}\t{ATTRIBUTE_BREAK}\n{STYLE_BREAK * 20}\t{ATTRIBUTE_BREAK * 20}\n",
        encoding="utf-8",
    )
    return work


def test_hostile_text_in_every_place_stays_text(registry, tmp_path: Path) -> None:
    """Text that closes the stylesheet and starts a script, or closes an attribute and adds
    an element with a handler, is shown as text wherever it comes from; the page is the same
    elements as ever and its stylesheet is the package's file."""
    work = hostile_workdir(tmp_path / "work")
    text = write_page(work, registry).read_text(encoding="utf-8")
    parsed = Parsed(text)
    assert parsed.tags <= PAGE_TAGS, parsed.tags - PAGE_TAGS
    assert not [name for name, _ in parsed.attributes if name.startswith("on")]
    assert "<script" not in text and "<img" not in text and text.count("</style>") == 1
    css = (Path(inspect.getfile(collect)).parent / "templates" / "page.css").read_text()
    assert "".join(parsed.style).strip() == css.strip()
    shown = "".join(parsed.text)
    assert STYLE_BREAK in shown and ATTRIBUTE_BREAK in shown and HOSTILE in shown
    assert f"{STYLE_BREAK}{ATTRIBUTE_BREAK}: loss" in shown  # an SVG chart's title
    titles = [value for name, value in parsed.attributes if name in ("title", "aria-label")]
    assert STYLE_BREAK * 20 in titles  # the whole rejected side, in its cell's tooltip
    chart = Parsed(line_chart({ATTRIBUTE_BREAK: [(1, 2.0), (2, 1.0)]}, STYLE_BREAK))
    assert chart.tags == {"svg", "text", "rect", "line", "polyline", "circle", "title"}
    assert (
        ATTRIBUTE_BREAK in "".join(chart.text) and ("aria-label", STYLE_BREAK) in chart.attributes
    )


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

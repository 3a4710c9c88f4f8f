"""The fidelity tables: rows kept as data in recipes/fidelity/<recipe>.yaml, rendered into
docs/results.md between markers, and each row's key paths read in the recipe's paper profile.

    .venv/bin/python -m tests.support.fidelity          # rewrite docs/results.md's tables
    .venv/bin/python -m tests.support.fidelity --check  # exit 1 where docs/results.md differs

A key path is dot-separated from the resolved recipe (``steps.spm_pt.vocab_size``,
``data.jparacrawl.mtdata``). A step's settings are its recipe entry over its validated config,
so a default counts. In a mapping a segment may be a glob (``steps.pretrain_*.max_update``:
every match must hold the value); in a list an index, ``*``, or a component's name with optional
``[field=value,...]`` (``filters.length[unit=char].max_length``), every match again.

A row's ``quote`` is a verbatim span of its paper's text in ../shared/seeds (``check_quotes``:
whitespace collapsed, words broken by ``-`` and a line break joined)."""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import Recipe, load_recipe
from tests.support import ROOT

NAMES = ("nt5", "hwtsc", "yishu", "xiaomi")
SEEDS = ROOT.parent / "shared" / "seeds"
PAPERS = {"nt5": ("000", "001"), "yishu": ("002",), "xiaomi": ("003",), "hwtsc": ("004",)}
"""Each recipe's paper as numbered seed files (two extractions of NT5: either may hold a quote)."""
TABLES = ROOT / "recipes" / "fidelity"
RESULTS = ROOT / "docs" / "results.md"
BEGIN = (
    "<!-- fidelity:begin: generated from recipes/fidelity/*.yaml by tests/support/fidelity.py -->"
)
END = "<!-- fidelity:end -->"
COUNTED = ("faithful", "substituted", "missing", "infrastructure", "wrong")
Verdict = Literal["faithful", "substituted", "missing", "infrastructure", "wrong"]
_SEGMENT = re.compile(r"(?:[^.\[]|\[[^\]]*\])+")
_PICK = re.compile(r"^([^\[]+)(?:\[([^\]]*)\])?$")


class Row(BaseModel):
    """One technique of the paper against the recipe's paper profile."""

    model_config = ConfigDict(extra="forbid")
    technique: str
    paper: str
    quote: str = ""
    recipe: str
    keys: dict[str, Any] = {}
    verdict: Verdict
    reason: str = ""


class Table(BaseModel):
    """One recipe's file: a title, an intro, the rows, prose after the table."""

    model_config = ConfigDict(extra="forbid")
    title: str
    intro: str
    sets: list[str] = []  # --set values that loading the paper profile needs
    rows: list[Row]
    after: str = ""


def load_table(name: str, folder: Path = TABLES) -> Table:
    text = (folder / f"{name}.yaml").read_text(encoding="utf-8")
    return Table.model_validate(yaml.safe_load(text))


def counts(rows: list[Row]) -> str:
    """``Of its N rows, a faithful, b substituted, c missing and d infrastructure.``"""
    tally = {v: sum(row.verdict == v for row in rows) for v in COUNTED}
    parts = [f"{tally[v]} {v}" for v in COUNTED if v != "wrong" or tally[v]]
    return f"Of its {len(rows)} rows, {', '.join(parts[:-1])} and {parts[-1]}."


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_table(table: Table) -> str:
    lines = [f"### {table.title}", "", f"{_cell(table.intro)} {counts(table.rows)}", ""]
    lines += [
        "| technique | paper | recipe (step kind: setting) | status | note |",
        "|---|---|---|---|---|",
    ]
    for row in table.rows:
        paper = f'{row.paper}: "{row.quote}"' if row.quote else row.paper
        cells = (row.technique, paper, row.recipe, row.verdict, row.reason)
        lines.append("|" + "|".join(f" {_cell(c)} " if c else " " for c in cells) + "|")
    if table.after:
        lines += ["", table.after.strip()]
    return "\n".join(lines) + "\n"


def render_all(folder: Path = TABLES) -> str:
    return "\n".join(render_table(load_table(name, folder)) for name in NAMES)


def splice(text: str, tables: str) -> str:
    """``text`` with what lies between the markers replaced by ``tables``."""
    head, sep, rest = text.partition(BEGIN + "\n")
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"docs/results.md lacks the markers {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n\n{tables}\n{END}{tail}"


@cache
def paper_recipe(name: str) -> Recipe:
    sets = load_table(name).sets
    return load_recipe(ROOT / "recipes" / f"{name}.yaml", load_registry(), "paper", sets)


def settings_of(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe whose steps hold their validated config (defaults included) under
    their recipe entry."""
    steps = {}
    for step_id, entry in recipe.resolved.get("steps", {}).items():
        config = getattr(recipe.steps[step_id].plugin, "config", None)
        dumped = config.model_dump() if isinstance(config, BaseModel) else {}
        steps[step_id] = {**dumped, **entry}
    return {**recipe.resolved, "steps": steps}


def _picks(node: Any, segment: str) -> list[Any]:
    if isinstance(node, dict):
        return [node[k] for k in node if fnmatch.fnmatchcase(str(k), segment)]
    if not isinstance(node, list):
        return []
    if segment.isdigit():
        return [node[int(segment)]] if int(segment) < len(node) else []
    if segment == "*":
        return list(node)
    match = _PICK.match(segment)
    if not match:
        return []
    name, where = match.group(1), match.group(2) or ""
    wanted = dict(pair.split("=", 1) for pair in where.split(",") if pair)
    found = []
    for item in node:
        fields = item if isinstance(item, dict) else {"name": item}
        if fields.get("name") == name and all(str(fields.get(k)) == v for k, v in wanted.items()):
            found.append(item)
    return found


def lookup(settings: dict[str, Any], path: str) -> list[Any]:
    """Every value at ``path`` (several where a segment is a glob); [] when none."""
    nodes: list[Any] = [settings]
    for segment in _SEGMENT.findall(path):
        nodes = [picked for node in nodes for picked in _picks(node, segment)]
    return nodes


def normalise(value: Any) -> Any:
    """Numbers as floats, tuples as lists, at any depth: 64000 == 64000.0, 1e-8 == 1.0e-08."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    if isinstance(value, dict):
        return {str(k): normalise(v) for k, v in value.items()}
    return value


def check_keys(settings: dict[str, Any], keys: dict[str, Any]) -> list[str]:
    """What does not hold: a path with no value, or a value other than the quoted one
    (``~`` quotes none: the path must exist)."""
    problems = []
    for path, quoted in keys.items():
        found = lookup(settings, path)
        if not found:
            problems.append(f"{path}: no such setting")
            continue
        if quoted is None:
            continue
        wrong = [v for v in found if normalise(v) != normalise(quoted)]
        if wrong:
            problems.append(f"{path}: the row says {quoted!r}, the recipe has {wrong[0]!r}")
    return problems


def flatten(text: str) -> str:
    """``text`` with words broken by ``-`` and a line break joined, whitespace runs as one space."""
    return " ".join(re.sub(r"(\w)-\n(\w)", r"\1\2", text).split())


def paper_texts(name: str, folder: Path = SEEDS) -> list[str]:
    """The flattened seed texts of ``name``'s paper; [] where the folder lacks them."""
    return [
        flatten(path.read_text(encoding="utf-8"))
        for number in PAPERS[name]
        for path in sorted(folder.glob(f"{number}_*.txt"))
    ]


def check_quotes(rows: list[Row], texts: list[str]) -> list[str]:
    """The techniques whose quote no text holds verbatim (after ``flatten``)."""
    return [
        f"{row.technique}: quote not in the paper: {row.quote!r}"
        for row in rows
        if row.quote and not any(flatten(row.quote) in text for text in texts)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/results.md differs")
    args = parser.parse_args(argv)
    text = RESULTS.read_text(encoding="utf-8")
    new = splice(text, render_all())
    if args.check:
        if new != text:
            print("docs/results.md's fidelity tables differ from recipes/fidelity/*.yaml; run "
                  ".venv/bin/python -m tests.support.fidelity", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    RESULTS.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/results.md's fidelity tables (issue 44): each paper's techniques with the recipe's step,
and faithful / substituted / missing. A table must name every step kind its recipe's paper
profile uses, so it cannot fall behind the recipe; every row has a known status."""

from __future__ import annotations

import re

import pytest

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import load_recipe
from tests.support import ROOT

RESULTS = ROOT / "docs" / "results.md"
HEADINGS = {"nt5": "### NT5", "hwtsc": "### HW-TSC", "yishu": "### Yishu", "xiaomi": "### Xiaomi"}
STATUSES = {"faithful", "substituted", "missing", "infrastructure"}
SETS = {"yishu": ["vars.ccmt_dir=/nonexistent/ccmt"]}  # a registration-only corpus, not read


def fidelity_rows(name: str) -> list[list[str]]:
    """The rows of the recipe's table in the "Fidelity to the papers" section."""
    text = RESULTS.read_text(encoding="utf-8")
    section = text.split("\n## Fidelity to the papers", 1)[1].split("\n## ", 1)[0]
    block = section.split("\n" + HEADINGS[name], 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in block.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] != "technique":
            rows.append(cells)
    return rows


@pytest.mark.parametrize("name", list(HEADINGS))
def test_the_fidelity_table_names_every_step_kind_of_the_paper_profile(name: str) -> None:
    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml", load_registry(), "paper",
                         SETS.get(name, []))  # fmt: skip
    kinds = {spec.kind for spec in recipe.steps.values()}
    rows = fidelity_rows(name)
    assert len(rows) >= 15, f"{name}: {len(rows)} rows"
    for row in rows:
        assert len(row) == 5, row
        assert row[3] in STATUSES, f"{name}: status {row[3]!r} in {row}"
        if row[3] in ("substituted", "missing"):
            assert row[4], f"{name}: a {row[3]} row says why: {row}"
    named = {m for row in rows for m in re.findall(r"`([a-z_0-9]+)`", row[2])}
    assert kinds <= named, f"{name}: step kinds missing from the table: {sorted(kinds - named)}"

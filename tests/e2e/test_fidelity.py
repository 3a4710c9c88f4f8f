"""The fidelity tables (issues 44, 69): rows kept as data in recipes/fidelity/<recipe>.yaml,
docs/results.md's tables generated from them, every setting a row quotes read back from the
recipe's paper profile, every step kind of the profile named by a row, every quote found in its
paper's text (../shared/seeds)."""

from __future__ import annotations

import re

import pytest

from tests.support import fidelity
from tests.support.fidelity import Row, Table

SUBSTANTIVE = ("faithful", "substituted")


def test_docs_results_holds_the_generated_tables() -> None:
    text = fidelity.RESULTS.read_text(encoding="utf-8")
    assert fidelity.splice(text, fidelity.render_all()) == text, (
        "docs/results.md's fidelity tables are not the data's: "
        "run .venv/bin/python -m tests.support.fidelity"
    )


@pytest.mark.parametrize("name", fidelity.NAMES)
def test_every_row_has_a_known_verdict_and_none_is_wrong(name: str) -> None:
    table = fidelity.load_table(name)
    assert len(table.rows) >= 15, f"{name}: {len(table.rows)} rows"
    for row in table.rows:
        assert row.verdict != "wrong", f"{name}: {row.technique!r} is marked wrong"
        if row.verdict in ("substituted", "missing"):
            assert row.reason.strip(), f"{name}: a {row.verdict} row says why: {row.technique}"
        if row.recipe.startswith("none"):
            assert not row.keys, f"{name}: {row.technique!r} builds nothing yet quotes settings"


@pytest.mark.parametrize("name", fidelity.NAMES)
def test_every_quoted_setting_is_the_paper_profiles(name: str) -> None:
    table = fidelity.load_table(name)
    settings = fidelity.settings_of(fidelity.paper_recipe(name))
    problems = [
        f"{row.technique}: {problem}"
        for row in table.rows
        for problem in fidelity.check_keys(settings, row.keys)
    ]
    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", fidelity.NAMES)
def test_the_table_names_every_step_kind_of_the_paper_profile(name: str) -> None:
    kinds = {spec.kind for spec in fidelity.paper_recipe(name).steps.values()}
    rows = fidelity.load_table(name).rows
    named = {m for row in rows for m in re.findall(r"`([a-z_0-9]+)`", row.recipe)}
    assert kinds <= named, f"{name}: step kinds missing from the table: {sorted(kinds - named)}"


SETTINGS = {
    "steps": {
        "spm_pt": {"vocab_size": 64000, "user_defined_symbols": ["<BT>"]},
        "pretrain_a": {"max_update": 100000, "adam_eps": 1e-8},
        "pretrain_b": {"max_update": 100000, "adam_eps": 1e-8},
        "clean": {
            "filters": [
                {"name": "length", "unit": "char", "max_length": 500},
                {"name": "length", "unit": "token", "max_length": 150},
                "identical",
            ]
        },
    },
    "data": {"jesc": {"mtdata": "StanfordNLP-jesc_train-1-eng-jpn"}},
}


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        # the values as the recipe holds them, and as a row writes them (an int for a float)
        ({"steps.spm_pt.vocab_size": 64000.0, "steps.spm_pt.user_defined_symbols": ["<BT>"]}, ""),
        ({"steps.pretrain_*.max_update": 100000, "steps.pretrain_a.adam_eps": 1.0e-08}, ""),
        ({"steps.clean.filters.length[unit=char].max_length": 500}, ""),
        ({"steps.clean.filters.identical": None, "data.jesc.mtdata": None}, ""),
        # a row that quotes another value than the recipe's is reported with both
        ({"steps.spm_pt.vocab_size": 32000}, "the row says 32000, the recipe has 64000"),
        # every match of a glob or a component name must hold it
        ({"steps.clean.filters.length.max_length": 500}, "the recipe has 150"),
        ({"steps.pretrain_*.max_update": 50000}, "the recipe has 100000"),
        # a path that names nothing, even with `~`
        ({"steps.spm_pt.vocab": None}, "steps.spm_pt.vocab: no such setting"),
        ({"steps.clean.filters.length[unit=word].max_length": 500}, "no such setting"),
        ({"steps.missing_*.lr": 0.001}, "no such setting"),
    ],
)
def test_check_keys_reports_what_does_not_hold(keys: dict, problem: str) -> None:
    problems = fidelity.check_keys(SETTINGS, keys)
    assert (problem in problems[0]) if problem else not problems, problems


def test_an_edited_row_of_a_real_table_is_reported() -> None:
    table = fidelity.load_table("nt5")
    settings = fidelity.settings_of(fidelity.paper_recipe("nt5"))
    path, value = next(
        (p, v)
        for row in table.rows
        for p, v in row.keys.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    )
    assert not fidelity.check_keys(settings, {path: value})
    assert fidelity.check_keys(settings, {path: value + 1}) == [
        f"{path}: the row says {value + 1!r}, the recipe has {value!r}"
    ]


def test_the_header_counts_are_the_rows() -> None:
    rows = [
        Row(technique="a", paper="§1", recipe="`x`", verdict="faithful"),
        Row(technique="b", paper="§2", recipe="`y`", verdict="substituted", reason="r"),
        Row(technique="c", paper="§2", recipe="`z`", verdict="faithful", quote="q|r"),
    ]
    rendered = fidelity.render_table(Table(title="T", intro="Intro.", rows=rows))
    assert (
        "Intro. Of its 3 rows, 2 faithful, 1 substituted, 0 missing and 0 infrastructure."
        in rendered
    )
    assert '| c | §2: "q\\|r" | `z` | faithful | |' in rendered
    wrong = fidelity.counts([*rows, Row(technique="d", paper="§3", recipe="`w`", verdict="wrong")])
    assert wrong.endswith("0 missing, 0 infrastructure and 1 wrong.")


def test_a_stale_docs_section_is_replaced_between_the_markers() -> None:
    text = f"intro\n{fidelity.BEGIN}\nold table\n{fidelity.END}\nafter\n"
    assert (
        fidelity.splice(text, "new\n")
        == f"intro\n{fidelity.BEGIN}\n\nnew\n\n{fidelity.END}\nafter\n"
    )
    with pytest.raises(ValueError, match="markers"):
        fidelity.splice("no markers", "new\n")


@pytest.mark.parametrize("name", fidelity.NAMES)
def test_settings_rows_carry_keys(name: str) -> None:
    """Not every row names a setting, but most faithful or substituted rows do."""
    rows = [r for r in fidelity.load_table(name).rows if r.verdict in SUBSTANTIVE]
    keyed = sum(bool(r.keys) for r in rows)
    assert keyed >= len(rows) // 2, f"{name}: {keyed} of {len(rows)} rows carry keys"


@pytest.mark.skipif(
    not fidelity.SEEDS.is_dir(), reason="../shared/seeds (the papers' text) is absent"
)
@pytest.mark.parametrize("name", fidelity.NAMES)
def test_every_quote_is_in_its_paper(name: str) -> None:
    texts = fidelity.paper_texts(name)
    assert len(texts) == len(fidelity.PAPERS[name]), f"{name}: seed files {fidelity.PAPERS[name]}"
    rows = fidelity.load_table(name).rows
    problems = fidelity.check_quotes(rows, texts)
    assert not problems, f"{name}:\n" + "\n".join(problems)
    quoted = sum(bool(row.quote) for row in rows)
    assert quoted >= len(rows) * 3 // 4, f"{name}: {quoted} of {len(rows)} rows quote the paper"


def test_flatten_joins_broken_lines_and_hyphenated_words() -> None:
    text = "We set the vocab-\nulary size\n\nto 32,000;  a well-\nknown\tfix. Japanese-\n"
    assert (
        fidelity.flatten(text) == "We set the vocabulary size to 32,000; a wellknown fix. Japanese-"
    )


def test_a_quote_not_in_the_paper_is_reported_with_its_technique() -> None:
    texts = [fidelity.flatten("We set the vocab-\nulary size to 32,000\nfor the initial model.")]
    rows = [
        Row(technique="a", paper="§3", quote="vocabulary size to 32,000 for", recipe="`x`",
            verdict="faithful"),
        Row(technique="b", paper="§3", quote="vocabulary size to 64,000", recipe="`y`",
            verdict="faithful"),
        Row(technique="c", paper="none", recipe="`z`", verdict="infrastructure"),
        Row(technique="d", paper="§3", quote="Vocabulary size to 32,000", recipe="`w`",
            verdict="faithful"),
    ]  # fmt: skip
    assert fidelity.check_quotes(rows, texts) == [
        "b: quote not in the paper: 'vocabulary size to 64,000'",
        "d: quote not in the paper: 'Vocabulary size to 32,000'",
    ]
    assert not fidelity.check_quotes(rows[:1], ["another paper", *texts])

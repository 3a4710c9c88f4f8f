"""The defect generators of bench/cleaning_quality.py make what their labels say (the bench
itself needs ../shared/data and minutes: it never runs here)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import ROOT

BENCH = ROOT / "bench"

PAIRS = [
    ("The cat sat on the mat today.", "猫は今日マットの上に座った。"),
    ("It rained all day in Tokyo.", "東京では一日中雨が降った。"),
    ("She bought three apples.", "彼女はリンゴを三つ買った。"),
    ("We will meet again next week.", "来週また会いましょう。"),
]
OTHERS = (
    ["Kočka seděla na rohožce.", "V Praze celý den pršelo."],
    ["猫坐在垫子上。", "东京下了一整天雨。"],
)


@pytest.fixture
def data(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import _cleaning_data

    return _cleaning_data


@pytest.fixture
def ctx(data):
    return data.DefectContext(("en", "ja"), PAIRS, OTHERS)


def make(data, ctx, name, seed=7):
    return data.DEFECTS[name](PAIRS, ctx, np.random.default_rng(seed))


def test_every_defect_keeps_the_count_and_changes_the_pairs(data, ctx):
    for name in data.DEFECTS:
        out = make(data, ctx, name)
        assert len(out) == len(PAIRS), name
        if name != "duplicate":
            assert all(o != p for o, p in zip(out, PAIRS, strict=True)), name


@pytest.mark.parametrize("name", ["third_language", "misaligned", "markup", "char_repetition"])
def test_random_defects_are_deterministic_with_a_seed(data, ctx, name):
    assert make(data, ctx, name, seed=3) == make(data, ctx, name, seed=3)


@pytest.mark.parametrize(
    ("name", "holds"),
    [
        # one side changed, the other left as it was: even rows the first side, odd the second
        ("third_language", lambda o, p, side: o[side] in OTHERS[side]),
        ("copy", lambda o, p, side: o[0] == o[1] == p[side]),
        ("markup", lambda o, p, side: o[side].startswith(p[side]) and "<" in o[side]),
        ("truncation", lambda o, p, side: p[side].startswith(o[side]) and o[side]),
        ("repeated", lambda o, p, side: o[side].count(p[side]) >= 2),
        ("empty", lambda o, p, side: o[side] == ""),
        ("char_repetition", lambda o, p, side: len(o[side]) >= len(p[side]) + 7),
    ],
)
def test_one_sided_defects_touch_alternate_sides(data, ctx, name, holds):
    for i, (out, pair) in enumerate(zip(make(data, ctx, name), PAIRS, strict=True)):
        side = i % 2
        assert holds(out, pair, side), (name, out)
        if name != "copy":
            assert out[1 - side] == pair[1 - side], (name, out)


def test_truncation_keeps_about_thirty_percent(data, ctx):
    for i, (out, pair) in enumerate(zip(make(data, ctx, "truncation"), PAIRS, strict=True)):
        assert len(out[i % 2]) <= round(0.3 * len(pair[i % 2])) + 1


def repeats(text: str) -> bool:
    """A character 8 times, two characters 5 times or a word 5 times in a row."""
    words = text.split(" ")
    return any(text[k] * 8 in text or text[k : k + 2] * 5 in text for k in range(len(text))) or any(
        " ".join([w] * 5) in text for w in words
    )


def test_char_repetition_repeats_in_a_row(data, ctx):
    for i, (out, pair) in enumerate(zip(make(data, ctx, "char_repetition"), PAIRS, strict=True)):
        assert repeats(out[i % 2]) and not repeats(pair[i % 2]), out


def test_misaligned_takes_another_pairs_target(data, ctx):
    targets = {p[1] for p in PAIRS}
    for out, pair in zip(make(data, ctx, "misaligned"), PAIRS, strict=True):
        assert out[0] == pair[0] and out[1] != pair[1] and out[1] in targets


def test_build_labels_and_places_duplicates_last(data, ctx):
    pool = [(f"Sentence number {i}.", f"文番号{i}。") for i in range(60)]
    labeled = data.build(pool, ctx, clean=20, per_defect=4, seed=1)
    assert labeled.labels[:20] == ["clean"] * 20
    assert labeled.labels[-4:] == ["duplicate"] * 4
    assert all(p in labeled.pairs[:20] for p in labeled.pairs[-4:])
    clean_sides = {side for pair in labeled.pairs[:20] for side in pair}
    defects = labeled.pairs[20:-4]
    assert len(defects) == 4 * (len(data.DEFECTS) - 1)
    shared = [p for p in defects if set(p) & clean_sides - {""}]
    assert not shared, "a defect made from a clean pair shares a side with it"
    again = data.build(pool, ctx, clean=20, per_defect=4, seed=1)
    assert again.pairs == labeled.pairs and again.labels == labeled.labels
    assert data.build(pool, ctx, clean=20, per_defect=4, seed=2).pairs != labeled.pairs


def test_kept_mask_maps_a_clean_steps_output_back_to_its_input(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    import _cleaning_chains as chains

    pairs = [("a", "x"), ("b", "y"), ("a", "x"), ("c", "z")]
    # deduplication keeps the first copy; the later one is the dropped one
    assert chains.kept_mask(pairs, [("a", "x"), ("b", "y"), ("c", "z")]).tolist() == [
        True,
        True,
        False,
        True,
    ]
    with pytest.raises(SystemExit):
        chains.kept_mask(pairs, [("c", "z"), ("a", "x")])  # not a subsequence
    rejects = tmp_path / "rejects"
    rejects.mkdir()
    (rejects / "dedup.tsv").write_text("a\tx\n")
    (rejects / "embedding.tsv").write_text("a\tx\nb\ty\n")
    queues = chains._reject_queues(rejects, {"dedup"})
    # the first copy passed deduplication and was dropped later; the second is dedup's
    assert list(queues["a\tx"]) == ["embedding", "dedup"]

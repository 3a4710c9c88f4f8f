"""Exact deduplication as a step (plugins/steps/dedup.py: keys bucketed on disk, memory bounded)
on real WMT22 En-Ja pairs with injected copies: the same pairs as the ``dedup`` filter in a
clean chain for every key and comparison, at any shard size and bucket count, and the
best-scored copy kept given a score table."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtcore.api.engine import AppendLog
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from mtcore_plugins.steps._scores import read_scores
from mtcore_plugins.steps.dedup import KeyBuckets
from tests.plugins.selectors.test_selection import local, read
from tests.plugins.steps.test_near_dedup import wmt_pairs  # noqa: F401 (a fixture)

Pairs = list[tuple[str, str]]
VARIANTS = [(key, normalize) for key in ("pair", "source", "target") for normalize in (False, True)]


def with_copies(pairs: Pairs, seed: int = 1) -> Pairs:
    """``pairs`` with copies of earlier ones mixed in: exact copies, copies of one side with
    another partner, and copies in other casing and spacing (duplicates only when the
    comparison is normalized)."""
    rng = random.Random(seed)
    out = list(pairs)
    for _ in range(len(pairs) // 2):
        src, tgt = rng.choice(out)
        kind = rng.randrange(4)
        if kind == 0:
            copy = (src, tgt)
        elif kind == 1:
            copy = (src, rng.choice(pairs)[1])
        elif kind == 2:
            copy = (rng.choice(pairs)[0], tgt)
        else:
            copy = (src.upper().replace(" ", "  "), " " + tgt)
        out.insert(rng.randrange(len(out) + 1), copy)
    return out


def recipe(folder: Path, pairs: Pairs, **step: Any) -> dict[str, Any]:
    steps: dict[str, Any] = {
        "score": {"kind": "score", "inputs": {"corpus": "pool"}, "filters": ["length_ratio"]},
        "best": {
            "kind": "dedup",
            "inputs": {"corpus": "pool", "scores": "score"},
            "key": "source",
            "column": "length_ratio",
            "direction": "lower",
            **step,
        },
    }
    for key, normalize in VARIANTS:
        name = f"{key}{'_norm' if normalize else ''}"
        steps[f"chain_{name}"] = {
            "kind": "clean",
            "inputs": {"corpus": "pool"},
            "filters": [{"name": "dedup", "key": key, "normalize": normalize}],
        }
        steps[f"step_{name}"] = {
            "kind": "dedup",
            "inputs": {"corpus": "pool"},
            "key": key,
            "normalize": normalize,
            **step,
        }
    return {
        "name": "dd",
        "directions": ["en-ja"],
        "executor": {"workers": 2},
        "data": {"pool": local(folder, "pool", pairs)},
        "steps": steps,
    }


def test_the_step_keeps_what_the_chain_filter_keeps(tmp_path, registry, wmt_pairs):  # noqa: F811
    """Every key and comparison, over two worker processes, with shards of 37 pairs and 7
    bucket files, then one shard and one bucket: the same corpus as the clean chain's filter,
    and as a plain Python pass keeping first occurrences."""
    pairs = with_copies(wmt_pairs[:400])
    outputs = {}
    for shard_size, buckets in ((37, 7), (50_000, 1)):
        doc = recipe(tmp_path / "data", pairs, shard_size=shard_size, buckets=buckets)
        work = tmp_path / f"w{shard_size}"
        result = Runner(build_recipe(doc, registry), registry, work, show_progress=False).run()
        for key, normalize in VARIANTS:
            name = f"{key}{'_norm' if normalize else ''}"
            mine = read(Path(result.path(f"step_{name}")) / "corpus")
            chain = read(Path(result.path(f"chain_{name}")) / "corpus")
            assert mine == chain, name
            seen: set[str] = set()
            expected = []
            for pair in pairs:
                text = (
                    pair[0] if key == "source" else pair[1] if key == "target" else "\t".join(pair)
                )
                text = " ".join(text.casefold().split()) if normalize else text
                if text not in seen:
                    seen.add(text)
                    expected.append(pair)
            assert mine == expected, name
            counts = result.manifest(f"step_{name}")["counts"]
            assert counts["pairs_in"] == len(pairs)
            assert counts["duplicates"] == len(pairs) - len(expected) > 0
            outputs[(shard_size, name)] = mine
        best = read(Path(result.path("best")) / "corpus")
        outputs[(shard_size, "best")] = best
    assert all(outputs[(37, n)] == outputs[(50_000, n)] for _, n in outputs)
    # with scores: per source, the copy of lowest length ratio (ties: the first)
    header, table = read_scores(Path(result.path("score")) / "scores")
    ratio = table[:, header.index("length_ratio")]
    groups: dict[str, list[int]] = {}
    for i, (src, _) in enumerate(pairs):
        groups.setdefault(src, []).append(i)
    chosen = sorted(min(rows, key=lambda i: (ratio[i], i)) for rows in groups.values())
    assert outputs[(50_000, "best")] == [pairs[i] for i in chosen]
    assert chosen != sorted(rows[0] for rows in groups.values())  # scores chose other copies
    kept_header, kept_table = read_scores(Path(result.path("best")) / "scores")
    assert kept_header == header and kept_table[:, 0].tolist() == ratio[chosen].tolist()


def test_buckets_hold_a_share_of_the_keys_each(tmp_path):
    """100,000 keys in 16 bucket files: each file holds about a sixteenth of them (the most in
    memory at once), and duplicates spread over batches are found."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**63, size=(100_000, 2), dtype=np.uint64)
    keys[50_000:60_000] = keys[:10_000]  # copies in a later batch
    log = AppendLog(tmp_path, [KeyBuckets.name(i) for i in range(16)])
    store = KeyBuckets(log, 16)
    store.add(keys[:50_000], 0)
    store.add(keys[50_000:], 50_000)
    log.close()
    sizes = [store.path(i).stat().st_size // 24 for i in range(16)]
    assert sum(sizes) == 100_000 and max(sizes) < 100_000 / 16 * 1.1
    keep = np.ones(100_000, dtype=bool)
    assert store.drop(keep, None, True) == 10_000
    assert not keep[50_000:60_000].any() and keep[:50_000].all() and keep[60_000:].all()


def test_a_score_column_without_scores_is_named(tmp_path, registry, wmt_pairs):  # noqa: F811
    doc = recipe(tmp_path / "data", wmt_pairs[:20])
    doc["steps"]["best"]["inputs"] = {"corpus": "pool"}
    with pytest.raises(Exception, match=r"column 'length_ratio' names a score column.*no `scores`"):
        Runner(build_recipe(doc, registry), registry, tmp_path / "w", show_progress=False).run()


def test_an_append_log_resumes_after_the_last_whole_shard(tmp_path):
    """Two shards committed, a third half-written when the process dies: opened again, the
    files are cut back to the second commit and ``done`` is 2; a record of another layout
    (another shard size) or a file shorter than its record starts over."""
    log = AppendLog(tmp_path, ["a.bin", "b.bin"], layout="shard_size=10")
    for shard in (b"11", b"22"):
        log["a.bin"].write(shard)
        log["b.bin"].write(shard * 2)
        log.commit()
    log["a.bin"].write(b"3")  # killed here
    log.close()
    again = AppendLog(tmp_path, ["a.bin", "b.bin"], layout="shard_size=10")
    assert again.done == 2
    again.close()
    assert (tmp_path / "a.bin").read_bytes() == b"1122"
    assert (tmp_path / "b.bin").read_bytes() == b"11112222"
    other = AppendLog(tmp_path, ["a.bin", "b.bin"], layout="shard_size=20")
    assert other.done == 0
    other.close()
    assert (tmp_path / "a.bin").read_bytes() == b""
    log = AppendLog(tmp_path, ["a.bin", "b.bin"])
    log["a.bin"].write(b"xy")
    log.commit()
    log.close()
    (tmp_path / "a.bin").write_bytes(b"x")
    short = AppendLog(tmp_path, ["a.bin", "b.bin"])
    assert short.done == 0 and (tmp_path / "a.bin").read_bytes() == b""
    short.close()


def test_a_killed_step_resumes_its_shards(tmp_path, registry, wmt_pairs):  # noqa: F811
    """The near_dedup and dedup steps killed after some shards (their append logs left as a
    kill leaves them, a shard half-written) run again to the same output as a run never
    stopped, computing only the shards after the last commit."""
    pairs = with_copies(wmt_pairs[:300])
    doc = {
        "name": "resume",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {"pool": local(tmp_path / "data", "pool", pairs)},
        "steps": {
            "exact": {"kind": "dedup", "inputs": {"corpus": "pool"}, "shard_size": 40},
            "near": {"kind": "near_dedup", "inputs": {"corpus": "pool"}, "shard_size": 40},
        },
    }
    whole = Runner(build_recipe(doc, registry), registry, tmp_path / "w1", show_progress=False)
    first = whole.run()
    expected = {s: read(Path(first.path(s)) / "corpus") for s in ("exact", "near")}
    calls: list[int] = []
    from mtcore_plugins.steps import dedup, near_dedup

    real = {dedup: dedup._shard_keys, near_dedup: near_dedup._shard_hashes}

    def dying(module: Any, name: str) -> Any:
        def run(task: Any) -> Any:
            calls.append(task[0].count)
            if len(calls) == 4:
                raise KeyboardInterrupt  # as a kill would stop it, mid-step
            return real[module](task)

        return run

    for step, module, name in (
        ("exact", dedup, "_shard_keys"),
        ("near", near_dedup, "_shard_hashes"),
    ):
        calls.clear()
        work = tmp_path / f"w-{step}"
        one = {**doc, "steps": {step: doc["steps"][step]}}
        setattr(module, name, dying(module, name))
        try:
            with pytest.raises(KeyboardInterrupt):
                Runner(build_recipe(one, registry), registry, work, show_progress=False).run()
        finally:
            setattr(module, name, real[module])
        (log,) = work.rglob("appended.json")
        assert '"shards": 3' in log.read_text()
        calls.clear()
        setattr(module, name, lambda task, m=module: calls.append(1) or real[m](task))
        try:
            result = Runner(build_recipe(one, registry), registry, work, show_progress=False).run()
        finally:
            setattr(module, name, real[module])
        assert read(Path(result.path(step)) / "corpus") == expected[step]
        assert len(calls) == -(-len(pairs) // 40) - 3  # only the shards after the commit

"""Filter case tables (each row says why it is there) and the filter-chain semantics."""

from __future__ import annotations

import pytest

from mtcore.chain.filtering import KEPT, Chain, StatefulStage, make_specs
from mtcore.text.block import TextBlock


def build(registry, name, **config):
    plugin = registry.load("filters", name).from_dict(config)
    plugin.setup(("en", "ja"))
    return plugin


def verdict(registry, name, pair, **config):
    plugin = build(registry, name, **config)
    return plugin.accept(plugin.score([pair])[0])


@pytest.mark.parametrize(
    ("pair", "config", "kept"),
    [
        (("hello", "こんにちは"), {}, True),  # ordinary pair
        (("", "こんにちは"), {}, False),  # empty side is below the default minimum of 1
        (("x" * 500, "y"), {}, True),  # exactly 500 characters is kept (NT5 removes > 500)
        (("x" * 501, "y"), {}, False),  # 501 characters is removed
        (("a b c", "d"), {"unit": "word", "max_length": 2}, False),  # words counted on whitespace
        (("a b", "d"), {"unit": "word", "max_length": 2}, True),
    ],
)
def test_length(registry, pair, config, kept):
    assert verdict(registry, "length", pair, **config) is kept


@pytest.mark.parametrize(
    ("pair", "config", "kept"),
    [
        (("abcdef", "ab"), {"max_ratio": 3}, True),  # ratio exactly at the limit is kept
        (("abcdefg", "ab"), {"max_ratio": 3}, False),  # 3.5 > 3
        (("ab", "abcdefg"), {"max_ratio": 3}, False),  # symmetric: longer over shorter
        (("", "a"), {"max_ratio": 3}, False),  # an empty side is an infinite ratio
        (("one two three four", "一"), {"unit": "word", "max_ratio": 4}, True),
    ],
)
def test_length_ratio(registry, pair, config, kept):
    assert verdict(registry, "length_ratio", pair, **config) is kept


def test_dedup_keeps_first_copy_and_respects_key(registry):
    pairs = [("a", "1"), ("a", "1"), ("a", "2"), ("A  ", "1")]
    pair_dedup = build(registry, "dedup")
    assert pair_dedup.score(pairs) == [0, 1, 0, 0]
    source_dedup = build(registry, "dedup", key="source")
    assert source_dedup.score(pairs) == [0, 1, 1, 0]
    normalized = build(registry, "dedup", normalize=True)
    assert normalized.score(pairs) == [0, 1, 0, 1]  # case and whitespace folded


def test_chain_attributes_drops_to_the_first_rejecting_filter(registry):
    """Dedup sits between two stateless filters: it must see exactly the pairs that passed the
    filters before it, whatever the sharding, and drops count against the first rejecter."""
    specs = tuple(
        make_specs(
            [
                {"name": "length", "max_length": 10},
                {"name": "dedup", "key": "source"},
                {"name": "length_ratio", "max_ratio": 2},
            ]
        )
    )
    pairs = [
        ("x" * 20, "y"),  # too long: dropped by length, and never reaches dedup
        ("x" * 20, "yy"),  # same source, also too long: length, not dedup
        ("abc", "abc"),  # kept
        ("abc", "abcd"),  # duplicate source: dedup
        ("abcd", "a"),  # ratio 4: length_ratio
        ("abcd", "ab"),  # same source as the previous, which reached dedup: dedup
    ]
    expected = [0, 0, KEPT, 1, 2, 1]
    for shard_size in (1, 2, 6):
        stage = StatefulStage(specs, registry, ("en", "ja"))
        chain = Chain(specs, registry, ("en", "ja"))
        final: list[int] = []
        for start in range(0, len(pairs), shard_size):
            block = TextBlock.from_pairs(pairs[start : start + shard_size], ("en", "ja"))
            final += stage.resolve(chain.run_stateless(block)).tolist()
        assert final == expected, shard_size

"""Seeded, exact sampling arithmetic shared by the steps that draw pairs (``mix``, ``spm``'s
training sample): rounding of exact fractions and per-role random streams."""

from __future__ import annotations

import random
from fractions import Fraction


def round_half_up(value: Fraction) -> int:
    return int((value + Fraction(1, 2)).__floor__())


def role_rng(seed: int, role: str) -> random.Random:
    """Seeded by a string, through SHA-512: stable across runs, processes and Python builds."""
    return random.Random(f"mix:{seed}:{role}")

"""What more than one test folder uses: the repository's root and the shared data, step contexts,
tiny models, local clusters and servers, the download mirror, the browser."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (tests/support/ is two folders down)."""

"""Where a plan's steps live in a workdir, each path spelled once: a finished step in
``steps/<id>-<hash>/``, its work in progress in ``steps/.partial/<id>-<hash>/`` (with the job
folder ``<id>-<hash>.job`` beside it), a damaged one set aside in ``steps/.quarantine/``, its log
in ``logs/steps/<id>-<hash>.log``."""

from __future__ import annotations

from pathlib import Path

STEPS = "steps"
PARTIAL = ".partial"
QUARANTINE = ".quarantine"


def step_dirname(step_id: str, step_hash: str) -> str:
    """A step's folder name: ``<id>-<hash>``."""
    return f"{step_id}-{step_hash}"


def steps_root(workdir: Path) -> Path:
    return workdir / STEPS


def finished_dir(workdir: Path, dirname: str) -> Path:
    """The folder of a finished step (``dirname`` from :func:`step_dirname`)."""
    return steps_root(workdir) / dirname


def work_dir(workdir: Path, dirname: str) -> Path:
    """The folder a step runs in before it is renamed to :func:`finished_dir`."""
    return steps_root(workdir) / PARTIAL / dirname


def job_dir(workdir: Path, dirname: str) -> Path:
    """A scheduled step's job folder (its spec, state and output files)."""
    return work_dir(workdir, f"{dirname}.job")


def log_file(workdir: Path, dirname: str) -> Path:
    return workdir / "logs" / STEPS / f"{dirname}.log"


def quarantine_dir(workdir: Path) -> Path:
    """Where damaged finished steps are moved, kept for a look."""
    return steps_root(workdir) / QUARANTINE


def beside(final: Path, suffix: str = "") -> Path:
    """The work folder of the finished step folder ``final`` (in whichever workdir it is),
    ``suffix`` added to its name (``.reused``: a copy being put in place)."""
    return final.parent / PARTIAL / f"{final.name}{suffix}"

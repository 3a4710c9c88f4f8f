"""The step cache: when a step's output counts as done, and early cutoff.

A step's directory is named by its plan hash (:mod:`mtcore.recipe.plan`): its kind, config, plugin
versions, fingerprint and the *plan* hashes of the steps it reads. That name is known before
anything runs, but it changes whenever anything upstream changes identity, even when the
upstream step, run again, writes the very same bytes (a plugin version bump that changes no
output, a filter setting that drops nothing on this corpus).

So every manifest also records the step's **content key**: the same identity with each input
named by the sha256 of its bytes (the ``outputs`` hashes in the input step's manifest) instead
of its plan hash. Before a step runs, the runner computes its content key from its finished
inputs; if a complete step in the workdir has the same key, that step's files are hard-linked
(copied where links fail) into the new directory and the step counts as cached: nothing
downstream of an upstream step that reran to identical bytes runs again. This is the early
cutoff of build systems (Shake, Bazel), the open pain of mozilla/translations #145.

Manifests written before content keys existed have none and are never reused this way.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import IO, Any

from mtcore.contracts.errors import MtcoreError
from mtcore.recipe.hashing import content_hash, hash_file, hash_json
from mtcore.recipe.paths import beside, quarantine_dir

MANIFEST = "manifest.json"
log = logging.getLogger("mtcore")


LOCK_ENV = "MTCORE_LOCK_FILE"
"""The lock file of a run's downloads (``<recipe>.lock``), named by ``mtcore run`` and
``mtcore lock`` for the ``url`` source (mtcore_plugins.common.hub.lockfile)."""


def lock_path(recipe: Path) -> Path:
    """``recipes/nt5.yaml`` -> ``recipes/nt5.lock``."""
    return recipe.with_suffix(".lock")


def open_lock(path: Path) -> IO[str]:
    """A lock file opened for ``flock`` (read and write, created if missing), never through a
    symbolic link: one planted in a shared workdir or cache would have the lock's writes land
    on the file it names."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if path.is_symlink():
            raise MtcoreError(
                f"{path} is a symbolic link; a lock file must be a plain file (remove the link)"
            ) from exc
        raise
    return os.fdopen(fd, "r+", encoding="utf-8")


def is_complete(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def read_manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / MANIFEST).read_text())  # type: ignore[no-any-return]


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def links_changed(step_id: str, final: Path) -> bool:
    """Whether the complete step in ``final`` must run again because its outputs changed since
    it ran (:func:`damage`); says why in the log."""
    reason = damage(final)
    if reason is None:
        return False
    log.warning("step %s: %s; running the step again", step_id, reason)
    return True


def damage(final: Path, full: bool = False) -> str | None:
    """What changed in a complete step's outputs since it ran, or None. An output file that is
    a hard link of an input file (:func:`mtcore.recipe.hashing.linked_files`) changed with its
    input; any output file missing, of another size, or with a new mtime and other content than
    the manifest's sha256 (read again only when its mtime moved; remembered, as
    :func:`mtcore.recipe.hashing.content_hash`) was damaged or edited. ``full``: read every file
    again (``mtcore verify --full``), which also finds an edit that kept size and mtime."""
    manifest = read_manifest(final)
    for rel, stat in (manifest.get("linked") or {}).items():
        path = final / rel
        st = path.stat() if path.is_file() else None
        if st is None or [st.st_size, st.st_mtime_ns] != stat:
            return f"{path} is a hard link of an input file that changed since the step ran"
    hashes = manifest.get("outputs") or {}
    for rel, (size, mtime_ns) in (manifest.get("files") or {}).items():
        path = final / rel
        try:
            st = path.stat()
        except OSError:
            return f"{path} is missing"
        if st.st_size != size:
            return f"{path} has {st.st_size:,} bytes, {size:,} when the step wrote it"
        if full or st.st_mtime_ns != mtime_ns:
            digest = hash_file(path) if full else content_hash(path)
            if digest != hashes.get(rel):
                return f"{path} has other content than when the step wrote it (sha256)"
    return None


def unlisted(final: Path) -> list[str]:
    """Entries under a complete step's folder that its manifest does not list (a file put there
    after the step ran, or a link): relative paths. Its manifest and logs are listed by nature."""
    manifest = read_manifest(final)
    known = set(manifest.get("outputs") or {}) | {MANIFEST}
    found = []
    for path in sorted(final.rglob("*")):
        rel = path.relative_to(final).as_posix()
        if path.is_symlink() or (path.is_file() and rel not in known and path.suffix != ".log"):
            found.append(rel)
    return found


def quarantine(workdir: Path, final: Path) -> Path:
    """Moves a damaged step out of the way (``steps/.quarantine/<id>-<hash>.<time>``), kept for
    a look; the next run runs the step again."""
    folder = quarantine_dir(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = f"{final.name}.{time.strftime('%Y%m%d-%H%M%S')}"
    number = 0
    while True:
        target = folder / (stamp if not number else f"{stamp}.{number}")
        try:
            target.mkdir()  # claimed: no other verify moves a step to this name
        except FileExistsError:
            number += 1
            continue
        os.rename(final, target)  # onto its own empty folder
        return target


def file_stats(root: Path, outputs: dict[str, str]) -> dict[str, list[int]]:
    """``[size, mtime_ns]`` of each output file, for :func:`damage` to compare."""
    out: dict[str, list[int]] = {}
    for rel in outputs:
        st = (root / rel).stat()
        out[rel] = [st.st_size, st.st_mtime_ns]
    return out


def output_digest(manifest: dict[str, Any], output: str) -> str:
    """sha256 over the recorded hashes of the files of one output directory of a step."""
    prefix = output + "/"
    return hash_json({k: v for k, v in manifest["outputs"].items() if k.startswith(prefix)})


def content_key(identity: dict[str, Any], inputs: dict[str, dict[str, Any]]) -> str:
    """``identity`` (a planned step's, inputs as ``[role, plan hash, output]``) with every input
    named by its content instead; ``inputs`` maps each role to its step's manifest."""
    rows = [[role, output_digest(inputs[role], out), out] for role, _, out in identity["inputs"]]
    return hash_json({**identity, "inputs": rows, "by": "content"})


class ContentIndex:
    """The complete steps of a workdir by content key, read from their manifests on first use."""

    def __init__(self, steps: Path) -> None:
        self.steps = steps
        self._found: dict[str, Path] | None = None

    def _scan(self) -> dict[str, Path]:
        if self._found is None:
            self._found = {}
            for manifest in sorted(self.steps.glob(f"*/{MANIFEST}")):
                try:
                    key = json.loads(manifest.read_text()).get("content_key")
                except (OSError, ValueError):
                    continue
                if isinstance(key, str):
                    self._found.setdefault(key, manifest.parent)
        return self._found

    def add(self, key: str, path: Path) -> None:
        self._scan()[key] = path

    def find(self, key: str, step_id: str) -> Path | None:
        """A complete step directory with content key ``key`` whose linked inputs are unchanged."""
        path = self._scan().get(key)
        if path is None or not is_complete(path) or links_changed(step_id, path):
            return None
        return path


def adopt(source: Path, final: Path, updates: dict[str, Any]) -> dict[str, Any]:
    """Puts ``source``'s files at ``final`` (hard links; copies where the file system refuses)
    with ``source``'s manifest updated by ``updates``; returns that manifest."""
    staging = beside(final, ".reused")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    top = str(source)  # the manifest is written anew, never through a link to the source's
    shutil.copytree(
        source,
        staging,
        copy_function=_link_or_copy,
        symlinks=True,
        ignore=lambda folder, names: [MANIFEST] if folder == top else [],
    )
    manifest = {**read_manifest(source), **updates, "reused_from": source.name}
    write_manifest(staging, manifest)
    shutil.rmtree(beside(final), ignore_errors=True)
    if final.exists():  # an incomplete leftover without manifest
        shutil.rmtree(final)
    os.rename(staging, final)
    return manifest


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)

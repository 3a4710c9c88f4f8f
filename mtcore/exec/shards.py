"""Resume-safe sharded mapping over an executor.

The input is cut into shards of a fixed number of segments; each shard's result is saved under
the step's scratch directory as soon as it arrives (write, then rename), so a step killed
mid-way and run again submits only the shards that have no saved result. Results come back in
shard order whatever the executor's scheduling.

A saved result is data: its file ends with the sha256 of what precedes it, and a rerun that
finds one damaged (a disk full, an edit) discards it and computes the shard again instead of
failing on it forever; it is read back by an unpickler that builds only plain data (builtins,
containers, NumPy arrays) and record classes of mtcore's own packages (dataclasses, named
tuples, enums), never calls anything else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import pickle
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from mtcore.contracts.errors import StepError
from mtcore.contracts.kinds import Executor

log = logging.getLogger("mtcore")

T = TypeVar("T")
R = TypeVar("R")


def map_shards(
    executor: Executor,
    fn: Callable[[Any], R],
    shards: Iterable[T],
    make_task: Callable[[T], Any],
    store: Path | None,
    skip: int = 0,
    part: tuple[int, int] = (0, 1),
) -> Iterator[tuple[T, R]]:
    """Yields ``(shard, fn(make_task(shard)))`` in order, reusing results saved in ``store``.
    ``store`` None: results are not saved (the caller keeps its own resume state, as
    :class:`AppendLog` does); the first ``skip`` shards are read past, neither run nor
    yielded. ``part`` ``(rank, ranks)``: only the shards whose number is ``rank`` modulo
    ``ranks`` (one rank's share of a store that several fill side by side)."""
    rank, ranks = part
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
    # Shards read but not yet yielded, saved or submitted, in order. Popped as they are yielded,
    # so memory holds only the shards in flight, never the corpus.
    order: deque[tuple[int, T]] = deque()

    def saved(number: int) -> bool:
        return store is not None and _path(store, number).exists()

    def tasks() -> Iterator[Any]:
        for number, shard in enumerate(shards):
            if number < skip or number % ranks != rank:
                continue
            order.append((number, shard))
            if store is None or not _intact(_path(store, number)):
                yield make_task(shard)

    for result in _with_sentinel(executor.map(fn, tasks())):
        # Results arrive in submission order; shards saved by an earlier run sit between them.
        while order and saved(order[0][0]):
            number, shard = order.popleft()
            yield shard, _load(_path(store, number))  # type: ignore[arg-type]
        if result is _END:
            return
        number, shard = order.popleft()
        if store is not None:
            _save(_path(store, number), result)
        yield shard, result


class AppendLog:
    """Files a step appends each shard's results to (bucket files, a signature file), resumable
    without keeping the results a second time: after each shard, :meth:`commit` records every
    file's size (write, then rename). Opened again after a kill, the files are cut back to the
    last record and :attr:`done` says how many shards it covers (pass it as ``skip`` to
    :func:`map_shards`). ``layout`` names what shard numbers mean (the shard size): a record
    of another layout is not reused."""

    def __init__(self, folder: Path, names: Sequence[str], layout: str = "") -> None:
        self.folder = folder
        self.names = list(names)
        self.layout = layout
        self.state = folder / "appended.json"
        folder.mkdir(parents=True, exist_ok=True)
        self.done = 0
        sizes = dict.fromkeys(self.names, 0)
        try:
            record = json.loads(self.state.read_text(encoding="utf-8"))
            if sorted(record["sizes"]) == sorted(self.names) and record["layout"] == layout:
                self.done, sizes = int(record["shards"]), record["sizes"]
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        for name in self.names:  # a file shorter than its record: every shard again
            path = folder / name
            if (path.stat().st_size if path.exists() else 0) < int(sizes[name]):
                self.done, sizes = 0, dict.fromkeys(self.names, 0)
                break
        self.handles: dict[str, BinaryIO] = {}
        for name in self.names:
            path = folder / name
            handle = open(path, "r+b" if path.exists() else "w+b")  # noqa: SIM115
            handle.truncate(int(sizes[name]))
            handle.seek(0, os.SEEK_END)
            self.handles[name] = handle

    def __getitem__(self, name: str) -> BinaryIO:
        return self.handles[name]

    def commit(self) -> None:
        """One more shard is wholly appended."""
        for handle in self.handles.values():
            handle.flush()
        self.done += 1
        sizes = {name: handle.tell() for name, handle in self.handles.items()}
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"shards": self.done, "sizes": sizes, "layout": self.layout}),
            encoding="utf-8",
        )
        os.replace(tmp, self.state)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()


_END = object()


def _with_sentinel(results: Iterator[Any]) -> Iterator[Any]:
    yield from results
    yield _END


def shard_saved(store: Path, number: int) -> bool:
    """Whether ``store`` holds a saved result of shard ``number`` (of :func:`map_shards`)."""
    return _path(store, number).exists()


def _path(store: Path, number: int) -> Path:
    return store / f"{number:08d}.pkl"


def _save(path: Path, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.write(hashlib.sha256(data).digest())
    os.replace(tmp, path)


def _intact(path: Path) -> bool:
    """Whether a saved result exists and is whole; a damaged one is removed (the shard runs
    again)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return False
    if len(blob) > 32 and hashlib.sha256(blob[:-32]).digest() == blob[-32:]:
        return True
    log.warning("%s: a saved shard result is damaged; computing the shard again", path)
    path.unlink(missing_ok=True)
    return False


def _load(path: Path) -> Any:
    blob = path.read_bytes()
    if hashlib.sha256(blob[:-32]).digest() != blob[-32:]:
        raise StepError(f"{path}: a saved shard result changed while the step ran")
    try:
        return DataUnpickler(io.BytesIO(blob[:-32])).load()
    except pickle.UnpicklingError as exc:
        raise StepError(f"{path}: {exc}; delete the file to compute the shard again") from None


_PLAIN = {
    ("builtins", name)
    for name in ("set", "frozenset", "complex", "slice", "range", "bytearray", "object")
} | {("collections", name) for name in ("OrderedDict", "defaultdict", "deque", "Counter")}
_NUMPY = {"_reconstruct", "_frombuffer", "scalar", "ndarray", "dtype"}


def is_record(found: object) -> bool:
    """A class that only holds data: a dataclass without ``__post_init__`` (its ``__init__``
    assigns fields), a named tuple or an enum. Building one with chosen arguments runs no code
    of consequence, unlike any other class (issue 70: a saved result whose reduce built the
    zygote launcher with a chosen ``PYTHONPATH`` ran a ``sitecustomize.py`` on the next run)."""
    if not isinstance(found, type):
        return False
    if dataclasses.is_dataclass(found):
        return not hasattr(found, "__post_init__")
    return (issubclass(found, tuple) and hasattr(found, "_fields")) or issubclass(found, Enum)


class DataUnpickler(pickle.Unpickler):
    """Builds plain data only: the builtins and containers above, NumPy arrays and scalars,
    and record classes of mtcore's own packages (:func:`is_record`); any other global is
    refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        if module.split(".")[0] == "numpy" and (name in _NUMPY or name.endswith("DType")):
            return super().find_class(module, name)
        if module.split(".")[0] in ("mtcore", "mtcore_plugins"):
            found = super().find_class(module, name)
            if is_record(found):
                return found
        raise pickle.UnpicklingError(
            f"a saved shard result names {module}.{name}, which is not plain data"
        )


_WORKER_MEMO: dict[Hashable, Any] = {}
KEEP_MEMOS_ENV = "MTCORE_KEEP_WORKER_MEMOS"
"""Set to 1 (by :func:`keep_worker_memos`; worker processes inherit it), ``only`` and
:func:`worker_forget` drop nothing: a long-lived process that runs the same steps again and
again (``mtcore serve``) keeps every chain it built, at the memory of all of them at once;
the least recently used beyond :data:`KEPT_MEMOS` go (a key naming a call's own files would
otherwise pile up)."""
KEPT_MEMOS = 32


@contextmanager
def keep_worker_memos() -> Iterator[None]:
    """Within: this process and the workers it starts keep every memo (:data:`KEEP_MEMOS_ENV`)."""
    before = os.environ.get(KEEP_MEMOS_ENV)
    os.environ[KEEP_MEMOS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[KEEP_MEMOS_ENV]
        else:
            os.environ[KEEP_MEMOS_ENV] = before


def _keeping() -> bool:
    return os.environ.get(KEEP_MEMOS_ENV) == "1"


def worker_memo(key: Hashable, build: Callable[[], T], *, only: bool = False) -> T:
    """``build()`` once per worker process for ``key`` (a shard task names the plugin chain it
    needs by its settings, and the worker builds the chain on its first shard and reuses it
    for the rest). ``only`` drops every other memo first: for chains holding models, which
    should not pile up in a long-lived worker as steps succeed one another."""
    keeping = _keeping()
    if key not in _WORKER_MEMO:
        if only and not keeping:
            _WORKER_MEMO.clear()
        while keeping and len(_WORKER_MEMO) >= KEPT_MEMOS:
            del _WORKER_MEMO[next(iter(_WORKER_MEMO))]
        _WORKER_MEMO[key] = build()
    elif keeping:
        _WORKER_MEMO[key] = _WORKER_MEMO.pop(key)  # most recently used last
    value: T = _WORKER_MEMO[key]
    return value


def worker_memos(tag: str) -> list[Hashable]:
    """The keys of this worker's memos that are tuples starting with ``tag``."""
    return [k for k in _WORKER_MEMO if isinstance(k, tuple) and k and k[0] == tag]


def worker_forget(tag: str) -> None:
    """Drop every memo whose key is a tuple that starts with ``tag`` (a step that loaded
    models in the driver frees them when it ends), unless memos are kept."""
    if _keeping():
        return
    for key in worker_memos(tag):
        del _WORKER_MEMO[key]

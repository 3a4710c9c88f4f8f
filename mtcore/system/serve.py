"""``mtcore serve``: stages of a system kept loaded behind an HTTP JSON API in LibreTranslate's
shape (``POST /translate``, ``GET /languages``), so that a CAT tool, a web page or a script
sending a sentence at a time pays the loading once.

One worker thread owns the translators (:class:`Batcher`): requests that arrive within
``batch_wait`` seconds of each other for the same direction are translated in one
:meth:`~mtcore.system.inference.Translator.translate` call, up to ``batch_lines`` lines, and
each gets its own lines back. A request's lines pass the input policy ``mtcore translate``
reads a file with (:func:`request_lines`), so the server answers what ``mtcore translate``
writes for the same lines, as long as the stage's outputs do not depend on which lines are
translated together (docs/usage.md says how that was checked for the shipped recipes).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mtcore.contracts.errors import DataError, MtcoreError
from mtcore.contracts.stats import Stats
from mtcore.data.corpus import InputPolicy, decode_line
from mtcore.system.inference import STRICT_KEEP, Translator


@dataclass(frozen=True)
class Limits:
    """What one request may carry, and how requests are gathered into one translation."""

    max_body: int = 1 << 20  # bytes of a request body
    max_lines: int = 1000  # lines of one request, over all its texts
    max_chars: int = 5000  # characters of one line
    batch_lines: int = 500  # most lines translated in one call
    batch_wait: float = 0.005  # seconds a batch waits for more requests


class RequestError(MtcoreError):
    """A request the server refuses: its HTTP status and a message naming what is valid."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def direction_of(system: Translator) -> tuple[str, str]:
    """(source, target) language codes of a translator's stage."""
    return system.source, system.stage.direction[len(system.source) :]


@dataclass
class _Job:
    pair: tuple[str, str]
    lines: list[str]
    answer: Future[list[str]]


class Batcher:
    """A thread that owns the translators and translates what :meth:`submit` queues, gathering
    the requests for one direction that arrive close together into one call. The only thread
    that translates: worker processes die with the thread that started them."""

    def __init__(self, systems: dict[tuple[str, str], Translator], limits: Limits) -> None:
        self.systems, self.limits = systems, limits
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="mtcore-serve-batcher")
        self._lock = threading.Lock()
        self._closed = False
        self.batches = 0  # translate calls made (a test reads how requests were gathered)

    def start(self) -> None:
        self._thread.start()

    def submit(self, pair: tuple[str, str], lines: list[str]) -> Future[list[str]]:
        answer: Future[list[str]] = Future()
        with self._lock:
            if self._closed:
                raise RequestError(HTTPStatus.SERVICE_UNAVAILABLE, "the server is stopping")
            self._queue.put(_Job(pair, lines, answer))
        return answer

    def close(self) -> None:
        """Translates what is queued, then stops the thread."""
        with self._lock:
            self._closed = True
            self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        carry: _Job | None = None
        while True:
            first = carry or self._queue.get()
            carry = None
            if first is None:
                return
            batch, size = [first], len(first.lines)
            deadline = time.monotonic() + self.limits.batch_wait
            while size < self.limits.batch_lines:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None or more.pair != first.pair:
                    carry = more
                    break
                if size + len(more.lines) > self.limits.batch_lines:
                    carry = more
                    break
                batch.append(more)
                size += len(more.lines)
            self._translate(batch)

    def _translate(self, batch: list[_Job]) -> None:
        system = self.systems[batch[0].pair]
        try:
            self.batches += 1
            hyps = system.translate([line for job in batch for line in job.lines])
        except Exception as exc:
            if len(batch) == 1:
                batch[0].answer.set_exception(exc)
                return
            for job in batch:  # alone, so that one job's failure is its own
                self._translate([job])
            return
        start = 0
        for job in batch:
            job.answer.set_result(hyps[start : start + len(job.lines)])
            start += len(job.lines)


def request_lines(texts: Sequence[str], limits: Limits, policy: InputPolicy) -> list[list[str]]:
    """Each text's lines (split at ``\\n``) through the input policy ``mtcore translate`` reads
    a file with, within the limits; a line the policy would drop, or too many or too long
    lines, is a :class:`RequestError` naming the text and line."""
    found: list[list[str]] = []
    total = 0
    for index, text in enumerate(texts):
        lines = []
        for number, raw in enumerate(text.encode("utf-8", "surrogatepass").split(b"\n"), 1):
            where = f"q[{index}]" if len(texts) > 1 else "q"
            try:
                line = decode_line(raw, where, number, policy, Stats())
            except DataError as exc:
                raise RequestError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
            if line is None:
                raise RequestError(
                    HTTPStatus.BAD_REQUEST, f"{where}:{number}: the input policy drops this line"
                )
            if len(line) > limits.max_chars:
                raise RequestError(
                    HTTPStatus.BAD_REQUEST,
                    f"{where}:{number}: {len(line)} characters; at most {limits.max_chars} a "
                    "line (mtcore serve --max-chars)",
                )
            lines.append(line)
        total += len(lines)
        found.append(lines)
    if total > limits.max_lines:
        raise RequestError(
            HTTPStatus.BAD_REQUEST,
            f"{total} lines; at most {limits.max_lines} a request (mtcore serve --max-lines)",
        )
    return found


class App:
    """The API over a :class:`Batcher`: parses and checks requests, answers with JSON."""

    def __init__(self, batcher: Batcher, limits: Limits, policy: InputPolicy = STRICT_KEEP):
        self.batcher, self.limits, self.policy = batcher, limits, policy
        self.pairs = sorted(batcher.systems)

    def languages(self) -> list[dict[str, Any]]:
        """LibreTranslate's ``/languages``: each source with the targets it translates to."""
        sources = dict.fromkeys(src for src, _ in self.pairs)
        return [
            {"code": src, "name": src, "targets": [t for s, t in self.pairs if s == src]}
            for src in sources
        ]

    def translate(self, body: Any) -> dict[str, Any]:
        """LibreTranslate's ``/translate``: ``{"q": text or [texts], "source", "target",
        "format": "text"}`` -> ``{"translatedText": text or [texts]}``."""
        if not isinstance(body, dict):
            raise RequestError(HTTPStatus.BAD_REQUEST, f"the body must be a JSON object; {USAGE}")
        q = body.get("q")
        texts = [q] if isinstance(q, str) else q
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError(
                HTTPStatus.BAD_REQUEST, f"q must be a string or a list of strings; {USAGE}"
            )
        if body.get("format", "text") != "text":
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f"format {body['format']!r} is not supported; valid: text",
            )
        pair = self._pair(body.get("source"), body.get("target"))
        lines = request_lines(texts, self.limits, self.policy)
        flat = [line for text in lines for line in text]
        hyps = self.batcher.submit(pair, flat).result() if flat else []
        out, start = [], 0
        for text in lines:
            out.append("\n".join(hyps[start : start + len(text)]))
            start += len(text)
        return {"translatedText": out[0] if isinstance(q, str) else out}

    def _pair(self, source: Any, target: Any) -> tuple[str, str]:
        valid = ", ".join(f"{s}->{t}" for s, t in self.pairs)
        if (source, target) in self.pairs:
            return source, target
        if source == "auto":
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f"source 'auto' (language detection) is not supported; valid pairs: {valid}",
            )
        raise RequestError(
            HTTPStatus.BAD_REQUEST,
            f"no system for source {source!r} and target {target!r}; valid pairs: {valid}",
        )


USAGE = 'send {"q": "text" or ["texts"], "source": "en", "target": "ja", "format": "text"}'


class Handler(BaseHTTPRequestHandler):
    """One request: routes, size cap, JSON in and out; errors as ``{"error": ...}``."""

    server: Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/languages":
            self._send(HTTPStatus.OK, self.server.app.languages())
        elif self.path.split("?")[0] == "/translate":
            self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, "POST /translate", allow="POST")
        else:
            self._not_found()

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/translate":
            self._not_found()
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._refuse(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
            return
        cap = self.server.app.limits.max_body
        if length > cap:
            message = f"the body has {length} bytes; at most {cap} (mtcore serve --max-body)"
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, message)
            return
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._refuse(HTTPStatus.BAD_REQUEST, f"the body is not JSON ({exc}); {USAGE}")
            return
        try:
            self._send(HTTPStatus.OK, self.server.app.translate(body))
        except RequestError as exc:
            self._refuse(exc.status, str(exc))
        except Exception as exc:
            self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _not_found(self) -> None:
        self._refuse(HTTPStatus.NOT_FOUND, f"no {self.path}; POST /translate, GET /languages")

    def _refuse(self, status: HTTPStatus, message: str, allow: str | None = None) -> None:
        self.close_connection = status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE  # body unread
        self._send(status, {"error": message}, {"Allow": allow} if allow else {})

    def _send(
        self, status: HTTPStatus, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:
            self.server.log(f"{self.address_string()} {format % args}")


class Server(ThreadingHTTPServer):
    """The HTTP server with its :class:`App`; a thread per connection."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog (5 by default: a burst of clients is reset)

    def __init__(
        self, address: tuple[str, int], app: App, log: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(address, Handler)
        self.app, self.log = app, log


@contextmanager
def serving(
    systems: Sequence[Translator],
    host: str = "127.0.0.1",
    port: int = 0,
    limits: Limits | None = None,
    policy: InputPolicy = STRICT_KEEP,
    log: Callable[[str], None] | None = None,
) -> Iterator[Server]:
    """The systems held loaded (:meth:`Translator.hold`; those with the same executor share
    one), each warmed up by a one-line translation, behind a :class:`Server` answering on a
    thread of its own (port 0: a free one, ``server.server_address[1]``). On leaving: no new
    connections, what is queued is translated and answered, the workers end."""
    limits = limits or Limits()
    pairs = [direction_of(system) for system in systems]
    duplicates = sorted({f"{s}-{t}" for s, t in pairs if pairs.count((s, t)) > 1})
    if duplicates:
        raise MtcoreError(f"more than one system for {', '.join(duplicates)}")
    with ExitStack() as stack:
        shared: dict[str, Any] = {}
        for system in systems:
            key = json.dumps(system.executor, sort_keys=True, default=str)
            stack.enter_context(system.hold(shared.get(key)))
            shared.setdefault(key, system.held)
        batcher = Batcher(dict(zip(pairs, systems, strict=True)), limits)
        batcher.start()
        stack.callback(batcher.close)
        for pair in pairs:  # the models load now, not on the first request
            batcher.submit(pair, ["warm up"]).result()
        server = Server((host, port), App(batcher, limits, policy), log)
        stack.callback(server.server_close)
        thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="mtcore-serve")
        thread.start()
        try:
            yield server
        finally:
            server.shutdown()
            thread.join()

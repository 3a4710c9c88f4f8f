"""``mtcore serve`` over real HTTP (urllib) on a tiny finished run whose stage lowercases the
source: answers equal ``mtcore translate``'s, concurrent requests are gathered, bad requests
get their codes; and the command line starts, answers and stops on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from mtcore.contracts.registry import load_registry
from mtcore.exec import shards
from mtcore.recipe.load import load_recipe
from mtcore.system.inference import Translator
from mtcore.system.serve import Limits, serving
from tests.support.data import clean_split_recipe, real_slice

MTCORE = [sys.executable, "-m", "mtcore.cli"]
LINES = ["Hello World.", "", "Tom's CAT sat ON the Mat.", "  Spaces  Kept? "]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """(recipe, workdir): a finished run with one stage, en-ja ``lower``, that lowercases."""
    tmp = tmp_path_factory.mktemp("serve")
    files = real_slice(tmp / "data", "train", 60)
    doc = clean_split_recipe("tiny", files, [{"name": "length", "max_length": 200}], 10)
    doc["steps"]["post"] = {
        "kind": "normalize",
        "inputs": {"corpus": "split.test"},
        "processors": ["lowercase"],
    }
    doc["steps"]["eval_lower_enja"] = {
        "kind": "evaluate",
        "inputs": {"hyp": "post", "ref": "split.test"},
        "metrics": ["chrf"],
    }
    recipe, work = tmp / "tiny.yaml", tmp / "work"
    recipe.write_text(yaml.safe_dump(doc, allow_unicode=True))
    done = subprocess.run([*MTCORE, "run", str(recipe), "-w", str(work), "-q"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return recipe, work


def translated(run: tuple[Path, Path], lines: list[str]) -> list[str]:
    """``mtcore translate``'s output lines for ``lines``."""
    recipe, work = run
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    command = [*MTCORE, "translate", str(recipe), "-w", str(work)]
    done = subprocess.run(command, input=text, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode("utf-8").split("\n")[:-1]


def system(run: tuple[Path, Path], workers: int = 1) -> Translator:
    registry = load_registry()
    found = Translator.from_run(load_recipe(run[0], registry), registry, run[1], "en-ja")
    found.executor = ("local", {"workers": workers})
    return found


def call(port: int, path: str, body: object = None, raw: bytes | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of a GET (no body) or a POST to the server."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_answers_equal_translate_and_concurrent_requests_are_gathered(run):
    expected = translated(run, LINES)
    assert expected[0] == "hello world." and expected[1] == ""  # the stage does something
    limits = Limits(batch_wait=0.5)  # long enough that the threads below meet in one batch
    with serving([system(run, workers=2)], limits=limits) as server:  # a pool held
        port = server.server_address[1]
        assert call(port, "/languages") == (200, [{"code": "en", "name": "en", "targets": ["ja"]}])
        one = {"q": LINES[2], "source": "en", "target": "ja"}
        assert call(port, "/translate", one) == (200, {"translatedText": expected[2]})
        many = {"q": LINES, "source": "en", "target": "ja", "format": "text"}
        assert call(port, "/translate", many) == (200, {"translatedText": expected})
        joined = {"q": "\n".join(LINES), "source": "en", "target": "ja"}
        assert call(port, "/translate", joined) == (200, {"translatedText": "\n".join(expected)})

        before = server.app.batcher.batches
        answers: dict[int, tuple[int, dict]] = {}
        start = threading.Barrier(8)

        def ask(number: int) -> None:
            start.wait()
            body = {"q": [f"Line {number} IS {number}", LINES[number % 4]], "source": "en"}
            answers[number] = call(port, "/translate", {**body, "target": "ja"})

        threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for number in range(8):
            wanted = [f"line {number} is {number}", expected[number % 4]]
            assert answers[number] == (200, {"translatedText": wanted})
        assert server.app.batcher.batches - before < 8  # gathered, not one call each


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/translate", b"{not json", 400, "the body is not JSON"),
        ("/translate", {"source": "en", "target": "ja"}, 400, "q must be a string or a list"),
        ("/translate", {"q": [1], "source": "en", "target": "ja"}, 400, "list of strings"),
        ("/translate", {"q": "x", "source": "en", "target": "de"}, 400, "valid pairs: en->ja"),
        ("/translate", {"q": "x", "source": "auto", "target": "ja"}, 400, "'auto' (language"),
        (
            "/translate",
            {"q": "x", "source": "en", "target": "ja", "format": "html"},
            400,
            "valid: text",
        ),  # fmt: skip
        (
            "/translate",
            {"q": ["a\nb", "c", "d"], "source": "en", "target": "ja"},
            400,
            "4 lines; at most 3 a request (mtcore serve --max-lines)",
        ),  # fmt: skip
        (
            "/translate",
            {"q": ["a", "x" * 41], "source": "en", "target": "ja"},
            400,
            "q[1]:1: 41 characters; at most 40 a line",
        ),  # fmt: skip
        ("/translate", {"q": "a\x00b", "source": "en", "target": "ja"}, 400, "q:1: NUL"),
        (
            "/translate",
            {"q": "y" * 300, "source": "en", "target": "ja"},
            413,
            "at most 200 (mtcore serve --max-body)",
        ),  # fmt: skip
        ("/nowhere", {"q": "x"}, 404, "no /nowhere; POST /translate, GET /languages"),
        ("/translate", None, 405, "POST /translate"),
    ],
)
def test_bad_requests_get_their_status_and_say_what_is_valid(run, path, body, status, says):
    limits = Limits(max_body=200, max_lines=3, max_chars=40)
    with serving([system(run)], limits=limits) as server:
        port = server.server_address[1]
        raw = body if isinstance(body, bytes) else None
        got, answer = call(port, path, None if raw else body, raw)
        assert (got, list(answer)) == (status, ["error"])
        assert says in answer["error"], answer
        after = {"q": "Still UP", "source": "en", "target": "ja"}
        assert call(port, "/translate", after) == (200, {"translatedText": "still up"})


def test_the_command_line_serves_on_a_free_port_and_stops_on_sigterm(run):
    recipe, work = run
    command = [*MTCORE, "serve", str(recipe), "-w", str(work), "--port", "0", "-q"]
    command += ["--set", "executor.workers=2"]  # worker processes, ended on SIGTERM
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("mtcore serve: http://127.0.0.1:") and "(enja lower)" in first
        port = int(first.split(":")[3].split(" ")[0])
        body = {"q": ["ABC def"], "source": "en", "target": "ja"}
        assert call(port, "/translate", body) == (200, {"translatedText": ["abc def"]})
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill() if process.poll() is None else None
    assert process.returncode == 0, err
    assert "mtcore serve: stopped" in err


def test_kept_memos_survive_only_and_forget_and_stay_bounded(monkeypatch):
    monkeypatch.setattr(shards, "_WORKER_MEMO", {})
    shards.worker_memo(("translator", 1), lambda: "a", only=True)
    shards.worker_memo(("scorers", 1), lambda: "b", only=True)
    assert list(shards._WORKER_MEMO) == [("scorers", 1)]  # outside: one chain at a time
    with shards.keep_worker_memos():
        shards.worker_memo(("translator", 1), lambda: "a", only=True)
        shards.worker_forget("translator")
        assert list(shards._WORKER_MEMO) == [("scorers", 1), ("translator", 1)]
        monkeypatch.setattr(shards, "KEPT_MEMOS", 3)
        shards.worker_memo(("scorers", 1), lambda: "never built", only=True)  # used: last
        shards.worker_memo(("x", 1), lambda: "c")
        shards.worker_memo(("x", 2), lambda: "d")
        assert list(shards._WORKER_MEMO) == [("scorers", 1), ("x", 1), ("x", 2)]
    assert shards.KEEP_MEMOS_ENV not in __import__("os").environ

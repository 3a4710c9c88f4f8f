"""``mtcore serve`` against ``mtcore translate`` on a finished run, in one run: latency of one
sentence and throughput of the stage's test source, with the ratios.

``mtcore translate`` is timed as a user runs it (a fresh process: loading included), on one
line (median of ``--rounds``) and on the test source. The server is started once (its
start-up and warm-up timed apart), then timed warm: one sentence a request, ``--requests``
times in a row (median), and the test source both as one request and as one-line requests
from ``--clients`` threads at once (gathered into batches by the server). Every answer is
checked against ``mtcore translate``'s output for the same lines.

    cp -a /work/nt5_ref /tmp/nt5 && .venv/bin/python bench/serve_speed.py recipes/nt5.yaml \\
        -w /tmp/nt5 -d en-ja
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

MTCORE = [sys.executable, "-m", "mtcore.cli"]


def translate(run: list[str], lines: list[str]) -> tuple[float, list[str]]:
    """(seconds, output lines) of one ``mtcore translate`` process."""
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    started = time.perf_counter()
    done = subprocess.run([*MTCORE, "translate", *run], input=text, capture_output=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode()[-3000:])
    return seconds, done.stdout.decode("utf-8").split("\n")[:-1]


def post(port: int, body: dict) -> object:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/translate", data=json.dumps(body).encode()
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=3600) as answer:
        return json.loads(answer.read())["translatedText"]


def concurrent(port: int, pair: dict, lines: list[str], clients: int) -> list[str]:
    """The lines sent one per request by ``clients`` threads at once."""
    got: list[str] = [""] * len(lines)
    todo = iter(range(len(lines)))
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                number = next(todo, None)
            if number is None:
                return
            got[number] = str(post(port, {**pair, "q": lines[number]}))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("-w", "--workdir", required=True)
    parser.add_argument("-d", "--direction", required=True)
    parser.add_argument("-s", "--stage", default=None)
    parser.add_argument("--rounds", type=int, default=3, help="one-line translate processes")
    parser.add_argument("--requests", type=int, default=20, help="one-sentence requests")
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    run = [args.recipe, "-w", args.workdir, "-d", args.direction]
    run += ["-s", args.stage] if args.stage else []

    from mtcore.contracts.registry import load_registry
    from mtcore.recipe.load import load_recipe
    from mtcore.system.inference import Translator

    registry = load_registry()
    recipe = load_recipe(Path(args.recipe), registry)
    system = Translator.from_run(recipe, registry, Path(args.workdir), args.direction, args.stage)
    assert system.test is not None
    column = system.test.langs.index(system.source)
    lines = [pair[column] for pair in system.test]
    pair = {"source": system.source, "target": system.stage.direction[len(system.source) :]}

    one = [translate(run, lines[:1])[0] for _ in range(args.rounds)]
    cli_seconds, expected = translate(run, lines)

    started = time.perf_counter()
    server = subprocess.Popen(
        [*MTCORE, "serve", *run, "--port", "0", "-q"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split(":")[3].split(" ")[0])
        ready = time.perf_counter() - started
        warm = []
        for number in range(args.requests):
            line = lines[number % len(lines)]
            started = time.perf_counter()
            got = post(port, {**pair, "q": line})
            warm.append(time.perf_counter() - started)
            assert got == expected[number % len(lines)], (line, got)
        started = time.perf_counter()
        assert post(port, {**pair, "q": lines}) == expected, "one request: not translate's output"
        whole = time.perf_counter() - started
        started = time.perf_counter()
        assert concurrent(port, pair, lines, args.clients) == expected, "concurrent: differs"
        spread = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=120)

    latency, cli_one = statistics.median(warm), statistics.median(one)
    n = len(lines)
    print(f"stage {system.stage.name} ({system.stage.direction}), {n} test lines")
    print(f"mtcore translate, 1 line:      {cli_one:8.2f} s (median of {args.rounds})")
    print(f"mtcore translate, {n} lines:  {cli_seconds:8.2f} s ({n / cli_seconds:.1f} lines/s)")
    print(f"mtcore serve, start to ready: {ready:8.2f} s (loading and warm-up, once)")
    print(f"mtcore serve, 1 sentence:     {latency:8.3f} s (median of {args.requests}, warm)")
    print(f"mtcore serve, {n} in 1 request: {whole:8.2f} s ({n / whole:.1f} lines/s)")
    print(f"mtcore serve, {n} 1-line requests from {args.clients} clients: {spread:.2f} s "
          f"({n / spread:.1f} lines/s)")  # fmt: skip
    print(f"ratio, 1 sentence (translate / serve):   {cli_one / latency:6.1f}x")
    print(f"ratio, {n} lines, 1 request:            {cli_seconds / whole:6.1f}x")
    print(f"ratio, {n} lines, concurrent requests:  {cli_seconds / spread:6.1f}x")
    print("every answer equals mtcore translate's output")


if __name__ == "__main__":
    main()

"""Warm starts (mtcore.exec.launcher): a command forked from the zygote behaves as the same command
started cold: arguments, environment, working directory, output appended to the log, exit
status and signals, one process per call, and nothing left running."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mtcore.contracts.errors import StepError
from mtcore.exec import launcher
from mtcore.exec.process import run_logged

PROBE = """\
import os, signal, sys
print("argv", sys.argv[1:])
print("env", os.environ.get("PROBE_VALUE"), "parent", os.environ["MTCORE_PARENT_PID"] != "")
print("cwd", os.getcwd())
print("main", __name__)
sys.stdout.flush()
print("to stderr", file=sys.stderr)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] in ("int", "term"):  # Ctrl-C or a scheduler's SIGTERM, seen by the child first
    number = signal.SIGINT if sys.argv[1] == "int" else signal.SIGTERM
    signal.signal(number, signal.SIG_DFL)  # a tool's own default, whatever it inherited
    os.kill(os.getpid(), number)
if sys.argv[1] == "raise":
    raise ValueError("probe failed")
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A module that reports what it was given; zygotes that preload only ``json`` (seconds
    sooner than torch and fairseq: the first test preloads those)."""
    (tmp_path / "mtcore_probe.py").write_text(PROBE, encoding="utf-8")
    monkeypatch.setattr(launcher, "PRELOAD", ("json",))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(log: Path, arg: str, warm: bool) -> None:
    cmd = [sys.executable, "-m", "mtcore_probe", arg]
    run_logged(cmd, log, "probe", env={"PROBE_VALUE": "v1"}, warm=warm)


def test_warm_and_cold_commands_log_the_same(probe, monkeypatch):
    monkeypatch.setattr(launcher, "PRELOAD", launcher.PRELOAD_TOOLS)
    for warm in (False, True):
        log = probe / f"{warm}.log"
        log.write_text("header\n", encoding="utf-8")
        run(log, "0", warm)
    cold, warm_log = ((probe / f"{w}.log").read_text(encoding="utf-8") for w in (False, True))
    assert cold == warm_log
    assert cold.startswith("header\n$ ") and "argv ['0']" in cold and "env v1 parent True" in cold
    assert f"cwd {probe}" in cold and "main __main__" in cold and "to stderr" in cold


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize(
    ("arg", "reason"),
    [("3", "exit status 3"), ("kill", "signal 9"), ("raise", "exit status 1")],
)
def test_failures_name_the_exit_status(probe, warm, arg, reason):
    log = probe / "fail.log"
    with pytest.raises(StepError, match=reason):
        run(log, arg, warm)
    if arg == "raise":
        assert "ValueError: probe failed" in log.read_text(encoding="utf-8")


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("arg", ["int", "term"])
def test_a_child_stopped_by_sigint_or_sigterm_stops_the_run(probe, warm, arg):
    """Ctrl-C reaches the whole process group: when the tool dies of it before this process
    handles its own copy, the run still stops as interrupted (the CLI says how to resume and
    exits 130), not as a failed step (found by the SIGINT e2e test under load)."""
    with pytest.raises(KeyboardInterrupt, match="probe was stopped by signal"):
        run(probe / "stopped.log", arg, warm)


def test_a_zygote_serves_many_calls_and_another_environment_gets_its_own(probe):
    launcher.close_all()
    for _ in range(3):
        run(probe / "a.log", "0", warm=True)
    assert len(launcher._zygotes) == 1
    os.environ["PROBE_OTHER"] = "1"
    try:
        run(probe / "b.log", "0", warm=True)
    finally:
        del os.environ["PROBE_OTHER"]
    assert len(launcher._zygotes) == 2
    procs = [z.proc for z in launcher._zygotes.values()]
    launcher.close_all()
    assert all(proc.poll() is not None for proc in procs)


def test_a_dead_zygote_is_replaced(probe):
    launcher.close_all()
    run(probe / "a.log", "0", warm=True)
    (zygote,) = launcher._zygotes.values()
    zygote.proc.kill()
    zygote.proc.wait()
    run(probe / "a.log", "0", warm=True)
    assert launcher._zygotes and next(iter(launcher._zygotes.values())) is not zygote
    assert (probe / "a.log").read_text(encoding="utf-8").count("argv ['0']") == 2
    launcher.close_all()


def test_switched_off_runs_cold(probe, monkeypatch):
    launcher.close_all()
    monkeypatch.setenv(launcher.SWITCH, "0")
    run(probe / "a.log", "0", warm=True)
    assert not launcher._zygotes


def test_the_callers_directory_comes_first_on_the_path(tmp_path, monkeypatch):
    """``python -m`` looks in its working directory first: so does a fork of a zygote that was
    started in another directory."""
    monkeypatch.setattr(launcher, "PRELOAD", ("json",))
    launcher.close_all()
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mtcore_here.py").write_text(f"print('{name}')\n", encoding="utf-8")
    for name in ("first", "second"):
        monkeypatch.chdir(tmp_path / name)
        run_logged(
            [sys.executable, "-m", "mtcore_here"], tmp_path / f"{name}.log", "here", warm=True
        )
    assert len(launcher._zygotes) == 1
    assert (tmp_path / "second.log").read_text(encoding="utf-8").endswith("second\n")
    launcher.close_all()


SLEEPER = """\
import sys, time
print("start", time.time())
time.sleep(float(sys.argv[1]))
print("end", time.time())
"""


def test_commands_side_by_side_get_zygotes_of_their_own(probe):
    """Steps running side by side (issue 42) each get a warm process: two 1.5 s commands of one
    environment started at once overlap instead of waiting for the one zygote."""
    import threading

    (probe / "mtcore_sleeper.py").write_text(SLEEPER, encoding="utf-8")
    logs = [probe / f"s{i}.log" for i in range(2)]

    def go(log: Path) -> None:
        run_logged([sys.executable, "-m", "mtcore_sleeper", "1.5"], log, "sleeper", warm=True)

    threads = [threading.Thread(target=go, args=(log,)) for log in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    times = [
        {line.split()[0]: float(line.split()[1]) for line in log.read_text().splitlines()[1:]}
        for log in logs
    ]
    assert times[0]["start"] < times[1]["end"] and times[1]["start"] < times[0]["end"]
    assert len(launcher._zygotes) == 2
    launcher.close_all()

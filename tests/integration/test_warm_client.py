"""`sf submit` through the warm client, as fresh `sf` processes against a real embedded server:
the first submit runs cold and starts the daemon; the next ones are run by a child of the daemon
(their process imports none of typer, pydantic, httpx or rich) and make the same runs, print the
same bytes and return the same exit codes as cold ones, in the caller's directory and
environment. A changed install makes the daemon exit and the submit run cold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from starforge.cli import warm_client
from starforge.client import config
from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.client]
HEAVY = ("typer", "pydantic", "httpx", "rich")
IMAGE = "reg.example/t@sha256:" + "0" * 64
SUBMIT = ("submit", "c1", "--profile", "h200:1", "--image", IMAGE)

_PROBE = """
import json, sys
from starforge.cli.main import main
code = main()  # as the `sf` process calls it: argv from sys.argv
loaded = sorted(name for name, module in sys.modules.items() if module is not None)
print(json.dumps({"code": code, "modules": loaded}), file=sys.stderr)
"""


@dataclass
class Sf:
    code: int
    out: str
    err: str
    modules: set[str]

    @property
    def warm(self) -> bool:
        """Whether a daemon's child ran it: this process imported none of the command."""
        return not any(m.split(".")[0] in HEAVY for m in self.modules)


def sf_process(*args: str, cwd: Path, warm: bool = True, **env: str) -> Sf:
    """A fresh `sf ARGS` in ``cwd`` (the module's server: STARFORGE_HOME is in the
    environment), with the warm client on or off."""
    environ = {**os.environ, "STARFORGE_WARM_CLIENT": "1" if warm else "0", **env}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    *err, last = done.stderr.splitlines()
    report = json.loads(last)
    return Sf(report["code"], done.stdout, "\n".join(err), set(report["modules"]))


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


def daemon_pid(home: Path) -> int:
    return int((warm_client.folder(home) / "daemon.pid").read_text())


@pytest.fixture
def daemon(sf_home: Path) -> Iterator[Callable[..., int]]:
    """Start the home's daemon as a first submit does (`sf submit --help` runs cold and starts
    it, from a process like the tests'); returns its pid. Stopped at the end of the test."""

    def start(cwd: Path, **env: str) -> int:
        assert not sf_process("submit", "--help", cwd=cwd, **env).warm
        wait_until(lambda: warm_client.answers(sf_home), "the warm daemon answers")
        return daemon_pid(sf_home)

    yield start
    warm_client.stop(sf_home)


def run_view(sf: Callable[..., Result], printed: str) -> dict[str, object]:
    """What the run is, without what differs between any two runs (id, times, progress, the
    GPU-hours its time made)."""
    run_id = str(json.loads(printed)["run_id"])
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["status"] == "succeeded"
    spec = dict(view["spec"])  # type: ignore[call-overload]
    volatile = {"run_id", "console_url", "run_dir", "attempts", "events", "spec"}
    volatile |= {"created_at", "started_at", "ended_at", "queue_position", "gpu_hours", "cost"}
    return {**{k: v for k, v in view.items() if k not in volatile}, "spec": spec}


def without_ids(text: str, *run_ids: str) -> str:
    for run_id in run_ids:
        text = text.replace(run_id, "RUN")
    return text


def test_a_warm_submit_makes_and_prints_what_a_cold_one_does(
    sf: Callable[..., Result],
    sf_home: Path,
    custom_lab: Callable[..., Lab],
    daemon: Callable[..., int],
) -> None:
    lab = custom_lab()
    daemon(lab.root)
    first = sf_process(*SUBMIT, "--json", cwd=lab.root, warm=False)  # uploads the files
    assert first.code == 0, first.err
    cold = sf_process(*SUBMIT, "--json", cwd=lab.root, warm=False)
    assert (cold.code, cold.warm) == (0, False), cold.err
    warm = sf_process(*SUBMIT, "--json", cwd=lab.root)
    assert (warm.code, warm.warm, warm.err) == (0, True, cold.err)
    cold_doc, warm_doc = json.loads(cold.out), json.loads(warm.out)
    ids = (str(cold_doc["run_id"]), str(warm_doc["run_id"]))
    assert ids[0] != ids[1]
    assert without_ids(warm.out, *ids) == without_ids(cold.out, *ids)
    assert run_view(sf, warm.out) == run_view(sf, cold.out)
    # The human output too: the same lines, on a pipe (no colour) as the cold command prints.
    cold_text = sf_process(*SUBMIT, cwd=lab.root, warm=False)
    warm_text = sf_process(*SUBMIT, cwd=lab.root)
    assert warm_text.warm and (warm_text.code, warm_text.err) == (0, cold_text.err)
    run_ids = [line.split()[2].rstrip(":") for line in (cold_text.out, warm_text.out)]
    assert without_ids(warm_text.out, *run_ids) == without_ids(cold_text.out, *run_ids)
    assert "✓ submitted" in warm_text.out


def test_a_refused_submit_gives_the_cold_commands_error_and_exit_code(
    sf_home: Path, custom_lab: Callable[..., Lab], daemon: Callable[..., int]
) -> None:
    lab = custom_lab()
    daemon(lab.root)
    (lab.root / "experiments" / "c1" / "train.sh").write_text("#!/bin/sh\necho changed\n")
    cold = sf_process(*SUBMIT, cwd=lab.root, warm=False)
    warm = sf_process(*SUBMIT, cwd=lab.root)
    assert warm.warm and not cold.warm
    assert (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert warm.code == 2  # a rejection
    assert "uncommitted changes in experiments/c1/train.sh" in warm.err, warm.err


@pytest.mark.parametrize(
    "args",
    [("job", "ls", "--status", "paused"), ("job", "ls", "--limit", "ten")],
    ids=["no-match", "usage-error"],
)
def test_sf_job_ls_is_served_warm_and_says_what_the_cold_one_does(
    sf_home: Path, daemon: Callable[..., int], tmp_path: Path, args: tuple[str, ...]
) -> None:
    daemon(tmp_path)
    cold = sf_process(*args, cwd=tmp_path, warm=False)
    warm = sf_process(*args, cwd=tmp_path)
    assert warm.warm and not cold.warm
    assert (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert "no run matches --status paused" in warm.out or "'--limit'" in warm.err


def test_the_command_runs_in_the_callers_directory_and_environment(
    sf_home: Path, custom_lab: Callable[..., Lab], daemon: Callable[..., int], tmp_path: Path
) -> None:
    lab = custom_lab()
    daemon(lab.root)
    # Outside any lab: the lab is looked for from the caller's directory, not the daemon's.
    outside = tmp_path / "not-a-lab"
    outside.mkdir()
    cold = sf_process(*SUBMIT, cwd=outside, warm=False)
    warm = sf_process(*SUBMIT, cwd=outside)
    assert warm.warm and (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert warm.code != 0 and "starforge.yaml" in warm.err, warm.err
    # A server named by the caller's environment (none listens there) is the one tried.
    nowhere = {"STARFORGE_SERVER": "http://127.0.0.1:9", "STARFORGE_TOKEN": "t"}
    cold = sf_process(*SUBMIT, cwd=lab.root, warm=False, **nowhere)
    warm = sf_process(*SUBMIT, cwd=lab.root, **nowhere)
    assert warm.warm and (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert warm.code == 1 and "127.0.0.1:9" in warm.err, warm.err


def test_an_install_makes_the_daemon_exit_and_the_submit_run_cold(
    sf_home: Path, custom_lab: Callable[..., Lab], daemon: Callable[..., int], tmp_path: Path
) -> None:
    lab = custom_lab()
    site = tmp_path / "site-packages"
    site.mkdir()
    path = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    old = daemon(lab.root, **path)
    assert sf_process(*SUBMIT, "--json", cwd=lab.root, **path).warm
    (site / "installed_meanwhile.py").write_text("")  # what `pip install` does to the folder
    after = sf_process(*SUBMIT, "--json", cwd=lab.root, **path)
    assert (after.code, after.warm) == (0, False), after.err
    assert json.loads(after.out)["bytes_uploaded"] == 0
    wait_until(lambda: not config.pid_alive(old), "the stale daemon exits")
    # The cold submit started a fresh daemon, which serves the next one.
    wait_until(lambda: warm_client.answers(sf_home), "a fresh daemon answers")
    assert daemon_pid(sf_home) != old
    assert sf_process(*SUBMIT, "--json", cwd=lab.root, **path).warm


def test_the_switch_off_runs_the_command_in_its_own_process(
    sf_home: Path, custom_lab: Callable[..., Lab], daemon: Callable[..., int]
) -> None:
    lab = custom_lab()
    daemon(lab.root)
    off = sf_process(*SUBMIT, cwd=lab.root, warm=False)
    assert (off.code, off.warm) == (0, False), off.err


def interrupted_follow(lab: Lab, *, warm: bool) -> tuple[str, Sf]:
    """`sf submit --follow` interrupted by SIGINT to the `sf` process alone (a terminal's Ctrl-C
    reaches the caller's process group, never the daemon's child) once the job's log shows."""
    environ = {**os.environ, "STARFORGE_WARM_CLIENT": "1" if warm else "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE, *SUBMIT, "--follow"],
        cwd=lab.root,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal's shell. A suite started in the background (`cmd &` in a script)
        # inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    while "[topology]" not in lines[-1]:
        assert lines[-1], f"the log never showed: {lines}"
        lines.append(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    *err_lines, last = err.splitlines()
    report = json.loads(last)
    run_id = lines[0].split()[2].rstrip(":")
    return run_id, Sf(report["code"], "".join(lines) + out, "\n".join(err_lines), report["modules"])


def test_ctrl_c_interrupts_a_warm_command_as_it_does_a_cold_one(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab], daemon: Callable[..., int]
) -> None:
    lab = custom_lab(steps=100000, step_seconds=0.05)
    daemon(lab.root)
    got = {}
    for warm in (False, True):
        run_id, got[warm] = interrupted_follow(lab, warm=warm)
        assert sf("job", "stop", run_id).code == 0
        assert got[warm].warm == warm
    # The same code and lines (a cold one was once seen to add a blank line, once in three).
    said = {warm: [line for line in got[warm].err.splitlines() if line] for warm in got}
    assert (got[True].code, said[True]) == (got[False].code, said[False])
    assert got[True].code == 130


def sf_into_closed_pipe(*args: str, cwd: Path, warm: bool) -> tuple[int, str, bool]:
    """`sf ARGS | head -1` once head has exited: stdout is a pipe nobody reads any more (every
    write fails at once, so nothing depends on timing). (exit code, stderr, whether warm)."""
    read, write = os.pipe()
    os.close(read)
    environ = {**os.environ, "STARFORGE_WARM_CLIENT": "1" if warm else "0"}
    program = (
        [sys.executable, "-c", _PROBE] if warm else [sys.executable, "-m", "starforge.cli.main"]
    )
    try:
        done = subprocess.run(
            [*program, *args], cwd=cwd, env=environ, stdout=write, stderr=subprocess.PIPE,
            text=True, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    err = done.stderr
    if not warm:
        return done.returncode, err, False
    *lines, last = err.splitlines()
    report = json.loads(last)
    warmed = not any(m.split(".")[0] in HEAVY for m in report["modules"])
    return report["code"], "\n".join(lines), warmed


@pytest.mark.parametrize("args", [SUBMIT, ("submit", "--help")], ids=["submit", "help"])
def test_a_submit_into_a_closed_pipe_exits_quietly_warm_as_cold(
    sf_home: Path, custom_lab: Callable[..., Lab], daemon: Callable[..., int], args: tuple[str, ...]
) -> None:
    lab = custom_lab()
    daemon(lab.root)
    cold = sf_into_closed_pipe(*args, cwd=lab.root, warm=False)
    warm = sf_into_closed_pipe(*args, cwd=lab.root, warm=True)
    assert warm[2], "the daemon ran it"
    for code, err, _ in (cold, warm):
        assert code == 1
        assert "Traceback" not in err and "Broken pipe" not in err, err
    assert (warm[0], warm[1].strip()) == (cold[0], cold[1].strip())  # what the cold one says

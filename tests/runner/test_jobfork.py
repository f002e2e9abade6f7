"""A job forked from a runner with the training stack imported is the job a fresh interpreter
would have run: same argv, ``__main__``, ``sys.path[0]``, cwd, environment (with what the
stack's imports set), descriptors, process group and exit codes; its random numbers are its
own; and a job that does not match runs fresh, with the reason said.

Each test runs a real driver process (``jobfork_driver``, a runner's stand-in) that forks real
jobs; the same job is run with Popen to compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from starforge.runner import jobfork

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("jobfork_job.py")


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARFORGE_", "FORGE_"))}
    env["PYTHONPATH"] = str(ROOT)  # the job imports the test stack as ``tests.runner...``
    env["PYTHONUNBUFFERED"] = "1"
    return env


def drive(tmp_path: Path, jobs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict]:
    """Run the driver over ``jobs``; (one answer per job, the driver's own pid and pgid)."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run(
        [sys.executable, "-m", "tests.runner.jobfork_driver", str(plan)],
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return lines[:-1], lines[-1]


def job(tmp_path: Path, name: str, mode: str, **env: str) -> dict[str, Any]:
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    return {
        "argv": [sys.executable, str(JOB), mode],
        "cwd": str(cwd),
        "env": {**base_env(), "FORGE_RUN_ID": f"r-{name}", **env},
        "log": str(tmp_path / f"{name}.log"),
    }


def cold(spec: dict[str, Any], log: Path) -> int:
    with open(log, "ab") as out:
        done = subprocess.run(
            spec["argv"],
            cwd=spec["cwd"],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    return done.returncode


def first_line(log: Path) -> dict[str, Any]:
    return dict(json.loads(log.read_text().splitlines()[0]))


def test_a_forked_job_is_given_what_a_fresh_interpreter_would_be(tmp_path: Path) -> None:
    spec = job(tmp_path, "warm", "exit0")
    (answer,), driver = drive(tmp_path, [spec])
    assert answer["forked"] is True and answer["code"] == 0
    assert cold(spec, tmp_path / "cold.log") == 0
    warm, fresh = first_line(tmp_path / "warm.log"), first_line(tmp_path / "cold.log")
    for key in ("name", "argv", "path0", "cwd", "fds", "stdin", "stderr_is_stdout"):
        assert warm[key] == fresh[key], key
    assert warm["name"] == "__main__" and warm["path0"] == str(JOB.parent)
    assert warm["stdin"] == os.devnull and warm["stderr_is_stdout"] is True
    assert warm["fds"] == [0, 1, 2, 3]  # the listing's own descriptor, nothing of the runner's
    # The plan's environment exactly, plus what the stack's import set (as it would, fresh).
    assert warm["env"] == fresh["env"]
    assert warm["env"]["SET_BY_IMPORT"].endswith("/stack-cache")
    # The runner's own child, in the runner's process group (a stop of the group reaches it).
    assert warm["ppid"] == driver["driver"] and warm["pgid"] == driver["pgid"]
    assert answer["pid"] != driver["driver"]


def test_forked_jobs_end_with_the_codes_and_words_of_a_fresh_interpreter(
    tmp_path: Path,
) -> None:
    modes = ["exit3", "message", "raise", "interrupt"]
    answers, _ = drive(tmp_path, [job(tmp_path, mode, mode) for mode in modes])
    for mode, answer in zip(modes, answers, strict=True):
        spec = job(tmp_path, mode, mode)
        code = cold(spec, tmp_path / f"cold-{mode}.log")
        assert answer["forked"] is True and answer["code"] == code, mode
        warm_tail = (tmp_path / f"{mode}.log").read_text().splitlines()[1:]
        cold_tail = (tmp_path / f"cold-{mode}.log").read_text().splitlines()[1:]
        assert warm_tail[-1:] == cold_tail[-1:], mode  # the same last line (message, error)
    assert [a["code"] for a in answers] == [3, 1, 1, -2]


def test_a_missing_script_or_module_fails_as_python_says_it(tmp_path: Path) -> None:
    missing = job(tmp_path, "missing", "exit0")
    missing["argv"] = [sys.executable, str(tmp_path / "nowhere.py")]
    module = job(tmp_path, "module", "exit0")
    module["argv"] = [sys.executable, "-m", "no_such_module_here"]
    answers, _ = drive(tmp_path, [missing, module])
    for spec, answer in zip([missing, module], answers, strict=True):
        log = Path(spec["log"])
        warm_words = log.read_text()
        log.unlink()
        assert answer["forked"] is True
        assert answer["code"] == cold(spec, log), spec["argv"]
        assert warm_words == log.read_text()
    assert [a["code"] for a in answers] == [2, 1]


def test_two_forked_jobs_draw_their_own_random_numbers(tmp_path: Path) -> None:
    answers, _ = drive(tmp_path, [job(tmp_path, "a", "exit0"), job(tmp_path, "b", "exit0")])
    assert all(a["forked"] for a in answers)
    a, b = first_line(tmp_path / "a.log"), first_line(tmp_path / "b.log")
    assert a["numpy"] != b["numpy"] and a["random"] != b["random"]


def test_a_job_whose_environment_differs_runs_fresh_and_says_which_variable(
    tmp_path: Path,
) -> None:
    other = job(tmp_path, "other", "exit0", HF_HOME="/elsewhere", API_KEY="hunter2")
    per_run = job(tmp_path, "per-run", "exit0", CUDA_VISIBLE_DEVICES="3", STARFORGE_TOKEN="t")
    answers, _ = drive(tmp_path, [other, per_run])
    assert answers[0] == {
        "forked": False,
        "why": "its environment differs from the warm trainer's (API_KEY, HF_HOME)",
    }
    assert "hunter2" not in json.dumps(answers)  # names only: values may be secrets
    assert answers[1]["forked"] is True  # per-run variables are not read at import
    assert first_line(tmp_path / "per-run.log")["env"]["CUDA_VISIBLE_DEVICES"] == "3"


def test_a_program_that_is_not_this_interpreters_runs_fresh(tmp_path: Path) -> None:
    shell = job(tmp_path, "shell", "exit0")
    shell["argv"] = ["/bin/sh", "-c", "true"]
    flagged = job(tmp_path, "flagged", "exit0")
    flagged["argv"] = [sys.executable, "-X", "importtime", str(JOB)]
    answers, _ = drive(tmp_path, [shell, flagged])
    assert answers == [
        {"forked": False, "why": "/bin/sh is not a script or module of this interpreter"},
        {"forked": False, "why": f"{sys.executable} is not a script or module of this interpreter"},
    ]


def test_without_the_stack_imported_no_standby_is_forked() -> None:
    assert jobfork.imported_under() is None  # the test process imported nothing for jobs
    assert jobfork.Standby.fork() is None


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["/opt/another/bin/python3", "train.py"], None),  # another interpreter
        ([sys.executable, "train.py", "--lr", "1"], ("script", "train.py", ["--lr", "1"])),
        ([sys.executable, "-m", "pkg.mod", "a"], ("module", "pkg.mod", ["a"])),
        ([sys.executable, "-m"], None),
        ([sys.executable, "-u", "train.py"], None),
    ],
)
def test_only_plain_scripts_and_modules_of_this_interpreter_are_forked(
    argv: list[str], program: tuple[str, str, list[str]] | None
) -> None:
    assert jobfork.program_of(argv) == program


def test_waiting_with_a_timeout_on_a_forked_job_that_runs_on_times_out(tmp_path: Path) -> None:
    gated = job(tmp_path, "gated", "gate")
    gate = tmp_path / "gate"
    gated["argv"].append(str(gate))
    gated["gate"] = str(gate)
    (answer,), _ = drive(tmp_path, [gated])
    assert answer["forked"] is True and answer["code"] == 0 and gate.exists()


def test_a_forked_jobs_output_can_go_through_a_pipe_as_for_the_secrets_masker(
    tmp_path: Path,
) -> None:
    piped = job(tmp_path, "piped", "raise")
    piped["piped"] = True
    (answer,), _ = drive(tmp_path, [piped])
    assert answer["forked"] is True and answer["code"] == 1
    lines = (tmp_path / "piped.log").read_text().splitlines()
    assert lines and all(line.startswith("piped: ") for line in lines)  # stdout and stderr
    assert json.loads(lines[0].removeprefix("piped: "))["fds"] == [0, 1, 2, 3]
    assert lines[-1] == "piped: RuntimeError: the job broke"

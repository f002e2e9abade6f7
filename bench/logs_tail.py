"""`sf job logs RUN -n 5 --no-follow` of a finished run with a 10 MB log; prints one JSON document.

On an embedded server, a custom job prints about 10 MB of lines and ends; then N fresh `sf`
processes print its last 5 lines (`sf`'s stdlib fast path, :mod:`starforge.cli.fastpath`).
Anchors in the same invocation: coreutils `tail -n 5` of the log file itself; the full typer
command for the same lines (`sf --debug job logs RUN -n 5 --no-follow`: `--debug` is outside the
fast path's grammar), whose output must be the same bytes; and `sf job logs RUN -n 0 --no-follow`
(the whole log: what `-n 5` cost when it read the log from its start). The aim: at most 0.2 s.

Bytecode: a user's `pip install` leaves `.pyc` files, so every `sf` compiles nothing. A checkout
on PYTHONPATH under `PYTHONDONTWRITEBYTECODE=1` (as on some CI and dev machines) would recompile
every module of `starforge` in every process, which is not what a user pays; so the bench compiles
the package under test once (`compileall`, which writes even under that variable; the variable
only stops the interpreter's own writes) before it times anything. Third-party packages are
taken as installed (with their `.pyc`).

Usage: .venv/bin/python bench/logs_tail.py [--megabytes 10] [--runs 11]
"""

from __future__ import annotations

import argparse
import compileall
import json
import subprocess
import tempfile
import time
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, sf, submitted, summary, timed_sf

import starforge

JOB = """#!/usr/bin/env bash
python3 - <<'PY'
line = "step {:08d} loss 0.1234567 lr 0.0001 grad_norm 1.2345 tokens_per_s 12345.6 " + "x" * 20
for i in range({count}):
    print(line.format(i))
PY
"""


def wait_final(run_id: str, timeout_s: float = 300.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        view = json.loads(sf("job", "status", run_id, "--json").stdout)
        if view["status"] in {"succeeded", "failed", "stopped"}:
            return dict(view)
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run_id} did not end within {timeout_s} s: {view['status']}")
        time.sleep(0.5)


def compile_package() -> None:
    """The `.pyc` files a user's install has (see the module's docstring)."""
    if not compileall.compile_dir(Path(starforge.__file__).parent, quiet=1):
        raise SystemExit("compileall failed for the starforge package")


def timed(argv: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - began)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    count = args.megabytes * 1_000_000 // 100  # lines of 100 bytes
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp), job=JOB.replace("{count}", str(count)))
        commit(lab)
        with embedded(Path(tmp)):
            run_id = str(submitted(sf(*SUBMIT, cwd=lab).stdout)["run_id"])
            view = wait_final(run_id)
            log = Path(str(view["run_dir"])) / "logs" / "attempt-1.log"
            ours, cpu = [], []
            for _ in range(args.runs):
                seconds, out = timed_sf("job", "logs", run_id, "-n", "5", "--no-follow")
                ours.append(seconds)
                cpu.append(CPU[-1])
            assert len(out.splitlines()) == 5, out
            full, full_cpu = [], []
            for _ in range(3):
                seconds, full_out = timed_sf(
                    "--debug", "job", "logs", run_id, "-n", "5", "--no-follow"
                )
                full.append(seconds)
                full_cpu.append(CPU[-1])
            assert full_out == out, (full_out, out)
            whole = [timed_sf("job", "logs", run_id, "-n", "0", "--no-follow")[0]
                     for _ in range(3)]  # fmt: skip
            coreutils = timed(["tail", "-n", "5", str(log)], args.runs)
            size = log.stat().st_size
    print(
        json.dumps(
            {
                "log_bytes": size,
                "sf_job_logs_n5_no_follow": {**summary(ours), "cpu": summary(cpu)},
                "anchor_coreutils_tail_n5": summary(coreutils),
                "anchor_full_command_n5": {**summary(full), "cpu": summary(full_cpu)},
                "anchor_sf_job_logs_whole_log": summary(whole),
                "aim_s": 0.2,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

"""`sf job logs RUN -n 5 --no-follow` of a finished run with a 10 MB log; prints one JSON document.

On an embedded server, a custom job prints about 10 MB of lines and ends; then N fresh `sf`
processes print its last 5 lines. Anchors in the same invocation: coreutils `tail -n 5` of the
log file itself, and `sf job logs RUN -n 0 --no-follow` (the whole log: what `-n 5` cost when
it read the log from its start). The aim: at most 0.2 s.

Usage: .venv/bin/python bench/logs_tail.py [--megabytes 10] [--runs 11]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, sf, submitted, summary, timed_sf

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
                "anchor_sf_job_logs_whole_log": summary(whole),
                "aim_s": 0.2,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

"""A trivial job on the host, inside its image through the runner, and as a bare `podman run`.

Each case runs the same job (`echo hi; exit 0`) N times, wall clock from launch to exit:

* ``host_s``: the runner, the run without an image (unpack, env, entrypoint, exit record);
* ``image_s``: the runner, the same run inside a busybox image (podman run, inspect, rm);
* ``bare_podman_s``: ``podman run --rm --runtime runc IMAGE sh -c 'echo hi'`` alone.

``image_s - bare_podman_s`` is the platform's own overhead over podman's; ``image_s - host_s``
is what running inside an image costs a job. This measures the runner (launch -> exit), not the
server's submit -> running (scheduling and the executor are the same in both cases). Printed as
JSON. Usage: .venv/bin/python bench/images.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.containers.conftest import make_image, make_run

JOB = "echo hi\nexit 0\n"


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def runner(root: Path, *, image: str) -> float:
    bp = make_run(root, JOB, image=image, containers="podman" if image else "")
    return timed([sys.executable, "-m", "starforge.runner", str(bp)])


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(samples), 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    image = make_image({})
    cases: dict[str, list[float]] = {"host_s": [], "image_s": [], "bare_podman_s": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            cases["host_s"].append(runner(Path(tmp) / f"h{i}", image=""))
            cases["image_s"].append(runner(Path(tmp) / f"i{i}", image=image))
            bare = ["podman", "run", "--rm", "--runtime", "runc", image, "sh", "-c", "echo hi"]
            cases["bare_podman_s"].append(timed(bare))
    result = {name: summary(s) for name, s in cases.items()}
    result["platform_overhead_over_podman_s"] = round(
        result["image_s"]["median"] - result["bare_podman_s"]["median"], 3
    )
    print(json.dumps({"repeats": args.repeats, **result}, indent=2))


if __name__ == "__main__":
    main()

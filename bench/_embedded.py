"""What the client benchmarks share: `sf` as a fresh process, a lab, an embedded server.

`sf` runs as ``python -m starforge.cli.main`` with the lab as its working directory, so the
package under test must be importable from anywhere: installed, or on an absolute PYTHONPATH
(a relative one silently measures whatever `starforge` the interpreter has installed).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SF = [sys.executable, "-m", "starforge.cli.main"]
# A pinned digest: admission asks no registry; the jobs run on the host (no containers).
IMAGE = "reg.example/b@sha256:" + "0" * 64
SUBMIT = ["submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json"]


def sf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*SF, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"sf {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def timed_sf(*args: str, cwd: Path | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of one `sf` process; its CPU seconds go to :data:`CPU`."""
    began, used = time.perf_counter(), _children_cpu()
    done = sf(*args, cwd=cwd)
    CPU.append(_children_cpu() - used)
    return time.perf_counter() - began, done.stdout


CPU: list[float] = []  # user + system seconds of each timed `sf` (wall time suffers on a busy box)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_lab(root: Path, job: str = "#!/usr/bin/env bash\necho hello\n") -> Path:
    """A lab with one custom experiment ``c1`` (files added by the caller, then committed)."""
    lab = root / "lab"
    sf("init", str(lab), "--yes")
    sf("new", "c1", "--method", "custom/custom", cwd=lab)
    exp = lab / "experiments" / "c1"
    (exp / "train.sh").write_text(job)
    (exp / "config.yaml").write_text("starforge:\n  observability: platform\n")
    return lab


def commit(lab: Path) -> None:
    subprocess.run(["git", "add", "-A"], cwd=lab, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=lab, check=True)


@contextlib.contextmanager
def embedded(tmp: Path) -> Iterator[Path]:
    """An embedded server in its own home (the client's home too); yields the home."""
    home = tmp / "home"
    os.environ["STARFORGE_HOME"] = str(home)
    os.environ.pop("STARFORGE_SERVER", None)
    os.environ.setdefault("STARFORGE_CONTAINERS", "none")
    sf("server", "start")
    try:
        yield home
    finally:
        sf("server", "stop")


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "n": len(samples),
    }


def submitted(stdout: str) -> dict[str, object]:
    return dict(json.loads(stdout))

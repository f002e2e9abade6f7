"""What a runner forked from the warm runner pays for its first full garbage collection.

A forked runner shares the warm runner's memory until it writes to it. A full collection writes
to the header of every object it visits, so without ``gc.freeze()`` in the warm runner (what
``runner/warm.py`` does after its imports) a runner's first full collection copies the pages
of every object the imports made: CPU in the kernel's copy-on-write faults, and memory of its
own for the rest of its life (a runner lives as long as its job, and 18 run at once here).

Here: one process does the warm runner's imports (``warm.preload``), then forks ``--forks``
children, each of which allocates as a runner does and runs ``gc.collect()``; the figures are
the children's medians: minor page faults, CPU, and private dirty memory
(``/proc/self/smaps_rollup``), without ``gc.freeze()`` and with it, side by side.

Usage: PYTHONPATH=src .venv/bin/python bench/runner_fork.py [--forks 30]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
from typing import Any

from starforge.runner import warm


def child() -> str:
    work = [{"event": i, "detail": str(i)} for i in range(20_000)]  # a runner's own objects
    gc.collect()
    del work
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/smaps_rollup") as rollup:
        dirty = next(int(line.split()[1]) for line in rollup if line.startswith("Private_Dirty"))
    return json.dumps(
        {"faults": usage.ru_minflt, "cpu_ms": 1000 * (usage.ru_utime + usage.ru_stime), "kb": dirty}
    )


def forks(n: int) -> dict[str, Any]:
    seen: list[dict[str, float]] = []
    for _ in range(n):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, child().encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            seen.append(json.loads(answer.read()))
        os.waitpid(pid, 0)
    return {
        "minor_faults": statistics.median(s["faults"] for s in seen),
        "cpu_ms": round(statistics.median(s["cpu_ms"] for s in seen), 1),
        "private_dirty_mb": round(statistics.median(s["kb"] for s in seen) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--forks", type=int, default=30)
    n = parser.parse_args().forks
    warm.preload()
    before = forks(n)  # what a runner forked before this change paid
    gc.freeze()
    after = forks(n)
    print(json.dumps({"forks": n, "without_gc_freeze": before, "with_gc_freeze": after}, indent=2))


if __name__ == "__main__":
    main()

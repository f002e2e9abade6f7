"""``sf server start``: wall time to an answering server, and the server process's CPU by then.

Two ways, alternated in the same invocation, each in a fresh home: the production launcher (a
fresh ``python -m starforge.server``), and the test suite's (``tests/forked_servers.py``: the
same command forked from a python that has its imports done). The second is what the suite's
dozens of embedded servers cost it; the first is what a user waits for once.

Usage: .venv/bin/python bench/server_start.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.forked_servers

from tests import forked_servers  # noqa: E402

from starforge.cli import connect  # noqa: E402
from starforge.cli.main import main  # noqa: E402


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_start(root: Path) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp(dir=root)) / "home"
    os.environ["STARFORGE_HOME"] = str(home)
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["server", "start"]) == 0
        wall = time.perf_counter() - began
        pid = int(json.loads((home / "server" / "server.json").read_text())["pid"])
        cpu = cpu_s(pid)
        main(["server", "stop"])
    return wall, cpu


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(samples), 3), "max": round(max(samples), 3)}


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    os.environ.update(STARFORGE_WARM_CLIENT="0", STARFORGE_CONTAINERS="none")
    os.environ.pop("STARFORGE_SERVER", None)
    launcher = forked_servers.Launcher()
    launcher.start()  # its own imports are not a server's start
    seen: dict[str, dict[str, list[float]]] = {
        k: {"wall_s": [], "server_cpu_s": []} for k in ("fresh_python", "forked_preloaded")
    }
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for _ in range(args.rounds):
                for name, launch in (
                    ("fresh_python", connect.popen_server),
                    ("forked_preloaded", launcher),
                ):
                    connect.launch_server = launch
                    wall, cpu = one_start(Path(tmp))
                    seen[name]["wall_s"].append(wall)
                    seen[name]["server_cpu_s"].append(cpu)
        finally:
            connect.launch_server = connect.popen_server
            launcher.close()
    report = {
        name: {k: summary(v) for k, v in figures.items()} | {"n": args.rounds}
        for name, figures in seen.items()
    }
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main_()

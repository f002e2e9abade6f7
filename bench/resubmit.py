"""Resubmitting an unchanged experiment that holds a 500 MB file; prints one JSON document.

Three submits of the same commit on an embedded server: the first (everything hashed and
uploaded), a resubmit with the client's hash cache removed (the anchor: every file read and
hashed again, as before the cache), and a plain resubmit (the cache knows every file). The
aim: the plain resubmit in at most 0.5 s, uploading 0 bytes. Each submit starts once the run
of the one before has ended (its runner copies the 500 MB package: CPU the submit would share).
``third_party_imports_alone`` is the floor: a fresh interpreter importing only the libraries
`sf submit` uses (typer, pydantic, httpx, yaml, rich).

Bytecode: a user's `pip install` leaves compiled ``.pyc`` files beside the package, while a
checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (as on the project's machines) would compile every
module again in each `sf` process and measure the compiler. So the bench compiles the package it
measures once (``compileall``, as pip does) before timing anything.

Usage: .venv/bin/python bench/resubmit.py [--mebibytes 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import compileall
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, submitted, summary, timed_sf

from starforge.client import config
from starforge.client.http import Client
from starforge.contract.states import JobStatus
from starforge.project import git
from starforge.project.hashcache import HashCache
from starforge.project.packer import build_manifest


def write_big(path: Path, mebibytes: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = bytes(range(256)) * 4096  # 1 MiB that git compresses quickly
    with path.open("wb") as fh:
        for i in range(mebibytes):
            fh.write(i.to_bytes(8, "big") + block[8:])


def pack_s(lab: Path, cache_dir: Path, cold: bool) -> float:
    """In-process time of the packing step alone (what the hash cache saves)."""
    if cold:
        shutil.rmtree(cache_dir, ignore_errors=True)
    state = git.read_state(lab, ["experiments/c1/", "common/", "configs/"])
    paths = [*state.tracked, *state.untracked]
    began = time.perf_counter()
    build_manifest(lab, paths, HashCache(lab, cache_dir))
    return time.perf_counter() - began


def wait_until_done(stdout: str) -> None:
    """Wait for the run a submit made to end, so that the next submit meets an idle server: the
    run's runner copies and verifies the whole package, which would compete for the CPU."""
    run_id = str(submitted(stdout)["run_id"])
    info = config.read_server_file()
    assert info is not None
    deadline = time.monotonic() + 600
    with Client(str(info["url"]), token=config.read_local_token()) as client:
        while not JobStatus(client.get_run(run_id).status).is_terminal:
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run_id} did not end within 10 minutes")
            time.sleep(0.2)


def compile_package() -> None:
    """The measured package's modules compiled once, as an installed package has them."""
    import starforge

    compileall.compile_dir(Path(starforge.__file__).parent, quiet=1)


# What any `sf submit` imports before it runs a line of StarForge: the floor under its time.
FLOOR = "import typer, pydantic, httpx, httpcore._sync.connection_pool, yaml, rich.console"


def import_floor_s() -> float:
    """Wall seconds of a fresh interpreter importing only the third-party libraries `sf` uses."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", FLOOR], check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mebibytes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp))
        write_big(lab / "experiments" / "c1" / "assets" / "big.bin", args.mebibytes)
        commit(lab)
        with embedded(Path(tmp)) as home:
            first_s, out = timed_sf(*SUBMIT, cwd=lab)
            first = submitted(out)
            wait_until_done(out)
            cold, warm, uploaded, cold_cpu, warm_cpu = [], [], [], [], []
            for _ in range(args.runs):
                shutil.rmtree(home / "cache" / "hashes", ignore_errors=True)
                seconds, out = timed_sf(*SUBMIT, cwd=lab)
                cold.append(seconds)
                cold_cpu.append(CPU[-1])
                wait_until_done(out)
                seconds, out = timed_sf(*SUBMIT, cwd=lab)
                warm.append(seconds)
                warm_cpu.append(CPU[-1])
                uploaded.append(int(submitted(out)["bytes_uploaded"]))  # type: ignore[call-overload]
                wait_until_done(out)
            cache_dir = Path(tmp) / "bench-cache"
            pack_cold = [pack_s(lab, cache_dir, cold=True) for _ in range(args.runs)]
            pack_warm = [pack_s(lab, cache_dir, cold=False) for _ in range(args.runs)]
            floor = [import_floor_s() for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "file_mebibytes": args.mebibytes,
                "first_submit": {"s": round(first_s, 4), "bytes": first["bytes_uploaded"]},
                "resubmit_unchanged": {
                    **summary(warm),
                    "cpu": summary(warm_cpu),
                    "bytes_uploaded": max(uploaded),
                },
                "anchor_resubmit_without_hash_cache": {**summary(cold), "cpu": summary(cold_cpu)},
                "packing_step_with_cache": summary(pack_warm),
                "anchor_packing_step_without_cache": summary(pack_cold),
                "third_party_imports_alone": summary(floor),
                "aim_s": 0.5,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

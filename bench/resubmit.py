"""Resubmitting an unchanged experiment that holds a 500 MB file; prints one JSON document.

Submits of the same commit on an embedded server: the first (everything hashed and uploaded;
it also starts the warm client's daemon, as a user's first submit does), a resubmit with the
client's hash cache removed and the warm client off (the anchor: every file read and hashed
again, and every import done, as before either), a plain resubmit (the default: the cache knows
every file and the daemon's child runs the command) and the same with the warm client off
(``STARFORGE_WARM_CLIENT=0``: the command imports everything itself). The aim: the plain
resubmit in at most 0.5 s, uploading 0 bytes. The warm resubmit's ``caller_cpu`` is the calling
process's alone: the daemon's child that does the work is not its child. Each submit starts
once the run of the one before has ended (its runner copies the 500 MB package: CPU the submit
would share).
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
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, submitted, summary, timed_sf

from starforge.cli import warm_client
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


@contextlib.contextmanager
def warm_client_off() -> Iterator[None]:
    os.environ[warm_client.SWITCH] = "0"
    try:
        yield
    finally:
        os.environ.pop(warm_client.SWITCH, None)


def wait_until_warm(home: Path) -> int:
    """Wait for the daemon the first submit started to answer; its pid."""
    deadline = time.monotonic() + 120
    while not warm_client.answers(home):
        if time.monotonic() > deadline:
            raise SystemExit(f"no warm daemon answered; see {warm_client.folder(home)}")
        time.sleep(0.05)
    return int((warm_client.folder(home) / "daemon.pid").read_text())


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
        os.environ.pop(warm_client.SWITCH, None)  # the default: the warm client is on
        with embedded(Path(tmp)) as home:
            try:
                first_s, out = timed_sf(*SUBMIT, cwd=lab)
                first = submitted(out)
                wait_until_done(out)
                daemon = wait_until_warm(home)
                figures = resubmits(lab, home, args.runs)
                figures["warm_daemon_served_every_run"] = daemon == wait_until_warm(home)
            finally:
                warm_client.stop(home)
            cache_dir = Path(tmp) / "bench-cache"
            pack_cold = [pack_s(lab, cache_dir, cold=True) for _ in range(args.runs)]
            pack_warm = [pack_s(lab, cache_dir, cold=False) for _ in range(args.runs)]
            floor = [import_floor_s() for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "file_mebibytes": args.mebibytes,
                "first_submit": {"s": round(first_s, 4), "bytes": first["bytes_uploaded"]},
                **figures,
                "packing_step_with_cache": summary(pack_warm),
                "anchor_packing_step_without_cache": summary(pack_cold),
                "third_party_imports_alone": summary(floor),
                "aim_s": 0.5,
            },
            indent=2,
        )
    )


def resubmits(lab: Path, home: Path, runs: int) -> dict[str, object]:
    """Each run: the anchor (no hash cache, warm client off), a warm and a cold resubmit."""
    samples: dict[str, list[float]] = {name: [] for name in ("anchor", "warm", "cold")}
    cpu: dict[str, list[float]] = {name: [] for name in samples}
    uploaded: list[int] = []
    for _ in range(runs):
        for name in ("anchor", "warm", "cold"):
            if name == "anchor":
                shutil.rmtree(home / "cache" / "hashes", ignore_errors=True)
            with contextlib.ExitStack() as stack:
                if name != "warm":
                    stack.enter_context(warm_client_off())
                seconds, out = timed_sf(*SUBMIT, cwd=lab)
            samples[name].append(seconds)
            cpu[name].append(CPU[-1])
            if name != "anchor":
                uploaded.append(int(submitted(out)["bytes_uploaded"]))  # type: ignore[call-overload]
            wait_until_done(out)
    return {
        "resubmit_unchanged": {
            **summary(samples["warm"]),
            "caller_cpu": summary(cpu["warm"]),
            "bytes_uploaded": max(uploaded),
        },
        "resubmit_unchanged_warm_client_off": {
            **summary(samples["cold"]),
            "cpu": summary(cpu["cold"]),
        },
        "anchor_resubmit_without_hash_cache_or_warm_client": {
            **summary(samples["anchor"]),
            "cpu": summary(cpu["anchor"]),
        },
    }


if __name__ == "__main__":
    main()

"""Resubmitting an unchanged experiment that holds a 500 MB file; prints one JSON document.

Three submits of the same commit on an embedded server: the first (everything hashed and
uploaded), a resubmit with the client's hash cache removed (the anchor: every file read and
hashed again, as before the cache), and a plain resubmit (the cache knows every file). The
aim: the plain resubmit in at most 0.5 s, uploading 0 bytes.

Usage: .venv/bin/python bench/resubmit.py [--mebibytes 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, submitted, summary, timed_sf

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mebibytes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp))
        write_big(lab / "experiments" / "c1" / "assets" / "big.bin", args.mebibytes)
        commit(lab)
        with embedded(Path(tmp)) as home:
            first_s, out = timed_sf(*SUBMIT, cwd=lab)
            first = submitted(out)
            cold, warm, uploaded, cold_cpu, warm_cpu = [], [], [], [], []
            for _ in range(args.runs):
                shutil.rmtree(home / "cache" / "hashes", ignore_errors=True)
                seconds, out = timed_sf(*SUBMIT, cwd=lab)
                cold.append(seconds)
                cold_cpu.append(CPU[-1])
                seconds, out = timed_sf(*SUBMIT, cwd=lab)
                warm.append(seconds)
                warm_cpu.append(CPU[-1])
                uploaded.append(int(submitted(out)["bytes_uploaded"]))  # type: ignore[call-overload]
            cache_dir = Path(tmp) / "bench-cache"
            pack_cold = [pack_s(lab, cache_dir, cold=True) for _ in range(args.runs)]
            pack_warm = [pack_s(lab, cache_dir, cold=False) for _ in range(args.runs)]
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
                "aim_s": 0.5,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

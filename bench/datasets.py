"""Benchmarks of platform datasets; prints one JSON document.

One real embedded server (``sf server start``) in a temporary home.

* ``push``: ``sf dataset push`` of a ``--mb`` MB dataset (``--files`` random files) as a fresh
  CLI process: wall time and bytes uploaded;
* ``repush_unchanged``: the same push again (the identical version: 0 bytes uploaded);
* ``fetch_into_cache``: the runner's fetch of that version into an empty node cache (every file
  re-hashed, staged, renamed into place) against ``cp -r`` of the same files, and the second
  fetch (the cache hit a later run sees).

Usage: .venv/bin/python bench/datasets.py [--mb 200] [--files 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SF = [sys.executable, "-m", "starforge.cli.main"]


def sf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SF, *args], check=True, capture_output=True, text=True)


def timed_push(folder: Path, version: str) -> dict[str, Any]:
    began = time.perf_counter()
    done = json.loads(sf("dataset", "push", "bench", version, str(folder), "--json").stdout)
    return {
        "seconds": round(time.perf_counter() - began, 3),
        "bytes_uploaded": done["bytes_uploaded"],
        "bytes_skipped": done["bytes_skipped"],
        "created": done["created"],
        "ref": done["ref"],
    }


def fetch(home: Path, ref: str) -> dict[str, Any]:
    from starforge.contract.datasets import Resolved
    from starforge.runner import datasets
    from starforge.server.settings import load_settings

    owner, rest = ref.split("/", 1)
    name, version = rest.split("@", 1)
    view = json.loads(sf("dataset", "show", ref, "--json").stdout)
    root = load_settings(home).storage
    resolved = Resolved(
        owner=owner, name=name, version=version, path=".", manifest_sha256=view["manifest_sha256"]
    )
    began = time.perf_counter()
    folder, fetched = datasets.ensure(root, resolved)
    cold = time.perf_counter() - began
    began = time.perf_counter()
    _, again = datasets.ensure(root, resolved)
    warm = time.perf_counter() - began
    assert fetched and not again
    return {"cold_seconds": round(cold, 3), "cached_seconds": round(warm, 4), "folder": str(folder)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        data = Path(tmp) / "data"
        data.mkdir()
        per_file = args.mb * (1 << 20) // args.files
        for i in range(args.files):
            (data / f"part-{i:04d}.parquet").write_bytes(os.urandom(per_file))
        os.environ["STARFORGE_HOME"] = str(home)
        os.environ.pop("STARFORGE_SERVER", None)
        sf("server", "start")
        try:
            push = timed_push(data, "v1")
            repush = timed_push(data, "v1")
            fetched = fetch(home, push["ref"])
            began = time.perf_counter()
            shutil.copytree(data, Path(tmp) / "copy")
            subprocess.run(["sync"], check=False)
            copied = time.perf_counter() - began
        finally:
            sf("server", "stop")
    print(
        json.dumps(
            {
                "dataset_mb": args.mb,
                "files": args.files,
                "push": push,
                "repush_unchanged": repush,
                "fetch_into_cache": fetched,
                "plain_copy_seconds": round(copied, 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

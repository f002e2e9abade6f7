"""First submit of an experiment of 10,000 files of 1 KiB; prints one JSON document.

On an embedded server: the whole `sf submit` (pack, upload in batches, admit) of a fresh
experiment, and, as the anchor in the same invocation, the same kind of files uploaded the way
they were before batches (one `PUT /blobs/<sha256>` request, and one fsync on the server, per
file) for a sample of --anchor-files fresh files, with the rate carried over to 10,000.
The aim: the first submit in at most 5 s.

Bytecode: a user's `pip install` leaves compiled ``.pyc`` files beside the package, while a
checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (as on the project's machines) would compile every
module again in each `sf` process and measure the compiler. So the bench compiles the package it
measures once (``compileall``, as pip does) before timing anything.

Usage: .venv/bin/python bench/upload_many.py [--files 10000] [--anchor-files 1000]
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, submitted, timed_sf

from starforge.client import config
from starforge.client.http import Client


def write_files(folder: Path, count: int, salt: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"f{i:05d}.txt"
        head = f"{salt} {i}\n".encode()
        path.write_bytes(head + b"." * (1024 - len(head)))
        paths.append(path)
    return paths


def anchor_one_per_request(folder: Path, count: int) -> float:
    """Seconds to upload ``count`` fresh files one request each (the path before batches)."""
    paths = write_files(folder, count, salt=os.urandom(8).hex())
    info = config.read_server_file()
    assert info is not None
    with Client(str(info["url"]), token=config.read_local_token()) as client:
        began = time.perf_counter()
        for path in paths:
            client.upload_blob(hashlib.sha256(path.read_bytes()).hexdigest(), path)
        return time.perf_counter() - began


def compile_package() -> None:
    """The measured package's modules compiled once, as an installed package has them."""
    import starforge

    compileall.compile_dir(Path(starforge.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--anchor-files", type=int, default=1000)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp))
        write_files(lab / "experiments" / "c1" / "files", args.files, salt="bench")
        commit(lab)
        with embedded(Path(tmp)):
            seconds, out = timed_sf(*SUBMIT, cwd=lab)
            result = submitted(out)
            anchor_s = anchor_one_per_request(Path(tmp) / "anchor", args.anchor_files)
    per_file = anchor_s / args.anchor_files
    print(
        json.dumps(
            {
                "files": args.files,
                "first_submit": {
                    "s": round(seconds, 3),
                    "cpu_s": round(CPU[-1], 3),
                    "files_uploaded": result["files_uploaded"],
                    "bytes_uploaded": result["bytes_uploaded"],
                },
                "anchor_one_request_per_file": {
                    "files": args.anchor_files,
                    "s": round(anchor_s, 3),
                    "per_file_ms": round(per_file * 1000, 3),
                    "carried_to_files_s": round(per_file * args.files, 1),
                },
                "aim_s": 5.0,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

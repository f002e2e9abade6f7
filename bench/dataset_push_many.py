"""`sf dataset push` of 10,000 small files beside `sf submit` of as many; prints one JSON document.

On an embedded server, each as a fresh `sf` process: the first submit of an experiment of
``--files`` files of 1 KiB (packed, uploaded in batches, admitted), then the push of a folder of
as many other 1 KiB files (content none of the submit's files has, so every one is uploaded),
then the same push again (the identical version: nothing uploaded). The aim: the push within 1.5
times the submit.

Usage: .venv/bin/python bench/dataset_push_many.py [--files 10000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _embedded import CPU, SUBMIT, commit, embedded, make_lab, submitted, timed_sf
from upload_many import compile_package, write_files

AIM_RATIO = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp))
        write_files(lab / "experiments" / "c1" / "files", args.files, salt="submit")
        commit(lab)
        data = Path(tmp) / "data"
        write_files(data, args.files, salt="dataset")
        with embedded(Path(tmp)):
            submit_s, out = timed_sf(*SUBMIT, cwd=lab)
            submit_cpu = CPU[-1]
            sent = submitted(out)
            push_s, out = timed_sf("dataset", "push", "many", "v1", str(data), "--json")
            push_cpu = CPU[-1]
            pushed = json.loads(out)
            again_s, out = timed_sf("dataset", "push", "many", "v1", str(data), "--json")
            again = json.loads(out)
    print(
        json.dumps(
            {
                "files": args.files,
                "submit": {
                    "s": round(submit_s, 3),
                    "cpu_s": round(submit_cpu, 3),
                    "files_uploaded": sent["files_uploaded"],
                },
                "dataset_push": {
                    "s": round(push_s, 3),
                    "cpu_s": round(push_cpu, 3),
                    "files_uploaded": pushed["files_uploaded"],
                    "bytes_uploaded": pushed["bytes_uploaded"],
                },
                "dataset_repush_unchanged": {
                    "s": round(again_s, 3),
                    "files_uploaded": again["files_uploaded"],
                },
                "push_over_submit": round(push_s / submit_s, 2),
                "aim_ratio": AIM_RATIO,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

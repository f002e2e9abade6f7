"""The warm trainer marks its stack imported only when no import initialised CUDA's driver (a
forked job could not use CUDA then); a driver loaded into the process is seen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import mmap, sys
from starforge.runner import jobfork, warm
if len(sys.argv) > 1:  # the driver's library mapped, as cuInit leaves it
    with open(sys.argv[1], "rb") as fh:
        kept = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
warm.preload_trainer({}, ("json",))
print(warm.cuda_touched(), jobfork.imported_under() is not None)
"""


def probe(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_stack_imported_without_cuda_is_marked_for_forking() -> None:
    assert probe() == "False True"


def test_a_process_with_cudas_driver_loaded_forks_no_job(tmp_path: Path) -> None:
    driver = tmp_path / "libcuda.so.1"
    driver.write_bytes(b"\0" * 4096)
    assert probe(str(driver)) == "True False"

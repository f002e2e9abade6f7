"""An experiment's ``prepare.py`` outputs (tiny model, data files), built once per test session.

The trl/* templates' ``prepare.py`` builds a random tiny Llama and writes the data files; it is
deterministic, but each run is a fresh interpreter importing torch and transformers (about ten
seconds on a loaded two-core machine). Tests that only need the inputs call
``prepare_experiment`` instead: the first call for a given ``prepare.py`` (keyed by its bytes)
runs it for real into a cache folder shared by the session's xdist workers (and by the test
command's two pytest sessions: ``STARFORGE_TEST_INPUTS``, set by ``scripts/test.sh``), and every
call copies what is missing into the lab, keeping what exists, as ``prepare.py`` itself does.
The catalog tests still run ``prepare.py`` themselves: there it is the subject.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_cache_root: Path | None = None


def set_cache_root(root: Path) -> None:
    """Where the session keeps built inputs (tests/conftest.py sets it for the session)."""
    global _cache_root
    _cache_root = root


def _built(script: Path) -> Path:
    """The folder holding ``script``'s outputs (``models/``, ``data/``), built on first use.

    One build per key: a worker that finds another building it waits on the key's lock."""
    assert _cache_root is not None, "tests/conftest.py sets the cache root for the session"
    key = hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    done = _cache_root / f"prepared-{key}"
    if done.is_dir():
        return done
    _cache_root.mkdir(parents=True, exist_ok=True)
    with (_cache_root / f"prepared-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_dir():  # built by the worker that held the lock
            return done
        building = Path(tempfile.mkdtemp(prefix=f"building-{key}-", dir=_cache_root))
        done_now = subprocess.run(
            [sys.executable, str(script), "--lab", str(building)],
            cwd=building,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done_now.returncode == 0, done_now.stdout + done_now.stderr
        os.rename(building, done)  # atomic: a reader sees the whole folder or none
    return done


def prepare_experiment(lab_root: Path, exp: str) -> None:
    """What ``python experiments/EXP/prepare.py`` in ``lab_root`` leaves there."""
    built = _built(lab_root / "experiments" / exp / "prepare.py")
    for source in sorted(built.rglob("*")):
        if source.is_file():
            target = lab_root / source.relative_to(built)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)

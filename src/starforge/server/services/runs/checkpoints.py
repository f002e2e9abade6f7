"""The latest checkpoint of a run: what ``resume``, ``retry`` and auto-retry start from.

Checkpoints live under the run's output folder (``$FORGE_OUT_DIR``, one per run, shared by all
its attempts). Three naming schemes are recognised, each numbered by its training step:

- ``checkpoint-N/`` (Hugging Face Trainer / TRL): complete only once ``trainer_state.json`` is in
  it, because the Trainer writes that file after the weights and optimizer state;
- ``step-N`` (the custom contract; a file or a folder, written atomically by the job);
- ``global_step_N/`` (verl).

"Latest" is the highest N, compared as numbers (``checkpoint-100`` is after ``checkpoint-20``,
which name order gets wrong); equal steps go to the newest on disk. Half-written entries (a
``checkpoint-N`` without its trainer state, an empty folder, ``*.tmp``) are never chosen. The
search goes a few levels deep and never inside a checkpoint, so it stays cheap on big outputs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MAX_DEPTH = 3
_NAME = re.compile(r"(?:checkpoint-|step-|global_step_)(\d+)")
HF_STATE = "trainer_state.json"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int

    @property
    def name(self) -> str:
        return self.path.name


def step_of(path: Path) -> int | None:
    """The step in a checkpoint's name, or None when the name is not a checkpoint's."""
    match = _NAME.fullmatch(path.name)
    return int(match.group(1)) if match else None


def is_complete(path: Path) -> bool:
    """Whether a checkpoint-looking entry is whole enough to resume from."""
    try:
        if path.name.startswith("checkpoint-"):
            return path.is_dir() and (path / HF_STATE).is_file()
        if path.is_dir():
            return any(path.iterdir())
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _candidates(folder: Path, depth: int) -> list[Checkpoint]:
    found: list[Checkpoint] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        path = Path(entry.path)
        step = step_of(path)
        if step is not None:
            if is_complete(path):
                found.append(Checkpoint(path, step))
            continue  # never look inside a checkpoint
        if depth > 1 and entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            found.extend(_candidates(path, depth - 1))
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def all_checkpoints(out_dir: Path) -> list[Checkpoint]:
    """Every complete checkpoint under ``out_dir``, oldest step first."""
    found = _candidates(Path(out_dir), MAX_DEPTH)
    return sorted(found, key=lambda c: (c.step, _mtime(c.path)))


def latest(out_dir: Path) -> Checkpoint | None:
    """The complete checkpoint with the highest step under ``out_dir``, or None."""
    found = all_checkpoints(out_dir)
    return found[-1] if found else None

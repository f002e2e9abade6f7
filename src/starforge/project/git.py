"""Git provenance of a submission and git's own list of the files to pack.

A run records the full commit hash. Uncommitted changes to tracked files inside what is packed make
the tree dirty (refused unless ``--allow-dirty``); untracked files that would be packed are listed
as warnings; ignored files never travel.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from starforge.contract.errors import DirtyTree, GitError


@dataclass
class GitState:
    commit: str
    tracked: list[str]
    untracked: list[str]
    changed: list[str] = field(default_factory=list)  # tracked files with uncommitted changes

    @property
    def dirty(self) -> bool:
        return bool(self.changed)


def _git(root: Path, *args: str) -> str:
    try:
        result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise GitError("git is not installed", hint="install git and retry") from exc
    if result.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {root}: {result.stderr.strip()}")
    return result.stdout


def _split_z(text: str) -> list[str]:
    return [p for p in text.split("\0") if p]


def read_state(root: Path, prefixes: list[str]) -> GitState:
    """Commit, and the tracked / untracked / changed files under ``prefixes`` (lab-relative)."""
    if not (root / ".git").exists():
        raise GitError(
            f"{root} is not a git repository",
            hint="run `git init` and commit (or create the lab with `sf init`)",
        )
    head = subprocess.run(
        ["git", "rev-parse", "--verify", "HEAD"], cwd=root, capture_output=True, text=True
    )
    if head.returncode != 0:
        raise GitError(
            "the lab has no commit yet: a run must trace back to one",
            hint="commit your work: git add -A && git commit -m 'first experiment'",
        )
    specs = ["--", *prefixes]
    tracked = _split_z(_git(root, "ls-files", "-z", "--cached", *specs))
    untracked = _split_z(_git(root, "ls-files", "-z", "--others", "--exclude-standard", *specs))
    status = _split_z(_git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no", *specs))
    changed = sorted(_changed_paths(status))
    base = str(root)  # a string join per file: a lab may track thousands of them
    deleted = {p for p in tracked if not os.path.exists(f"{base}/{p}")}
    return GitState(
        commit=head.stdout.strip(),
        tracked=sorted(set(tracked) - deleted),
        untracked=sorted(untracked),
        changed=changed,
    )


def _changed_paths(entries: list[str]) -> set[str]:
    paths: set[str] = set()
    skip = False
    for entry in entries:
        if skip:  # the source path of a rename or copy follows its entry
            skip = False
            continue
        paths.add(entry[3:])
        skip = entry[0] in "RC"
    return paths


def require_clean(state: GitState, *, allow_dirty: bool) -> None:
    if state.dirty and not allow_dirty:
        shown = state.changed[:10]
        more = f" and {len(state.changed) - 10} more" if len(state.changed) > 10 else ""
        raise DirtyTree(
            f"uncommitted changes in {', '.join(shown)}{more}: a run must trace back to an "
            "exact commit",
            hint="commit them (git commit -am '...'), or pass --allow-dirty to submit anyway",
            details={"changed": state.changed},
        )


def has_commit(root: Path, commit: str) -> bool:
    """Whether the repository at ``root`` holds ``commit`` (a full or abbreviated hash)."""
    if not commit or commit.startswith("-") or not (root / ".git").exists():
        return False
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True
    )
    return found.returncode == 0


def changed_between(root: Path, old: str, new: str) -> list[str] | None:
    """The files that differ between two commits (``git diff --name-only``), lab-relative; None
    when the repository lacks either commit (a run submitted from another clone)."""
    if not (has_commit(root, old) and has_commit(root, new)):
        return None
    return _split_z(_git(root, "diff", "--name-only", "-z", old, new, "--"))

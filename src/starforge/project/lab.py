"""A lab: a git repository with ``starforge.yaml`` at its root.

Owns finding the root (walk up from the working directory, like git does), reading the project
name, and scaffolding a new lab with ``sf init``. Scaffolding never overwrites an existing lab.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from starforge import __version__
from starforge.contract.config import load_yaml
from starforge.contract.errors import GitError, InvalidName, LabExists, NotInLab, ProjectError
from starforge.contract.names import SAFE_SEGMENT, check_name

MARKER = "starforge.yaml"
LAB_DIRS = ("experiments", "configs", "common")

LAB_GITIGNORE = """\
# outputs, local models and caches never go into git
outputs/
models/
__pycache__/
*.pyc
.venv/
.DS_Store
# secret-looking files (the packer refuses them anyway)
.env
.env.*
.envrc
.netrc
*.pem
*.key
*.p12
id_rsa*
id_ed25519*
credentials.json
*token*.txt
"""


@dataclass(frozen=True)
class Lab:
    root: Path
    name: str

    @property
    def experiments_dir(self) -> Path:
        return self.root / "experiments"


def find_lab(start: Path | None = None) -> Lab:
    """The lab containing ``start`` (default: the working directory)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        marker = folder / MARKER
        if marker.is_file():
            return Lab(root=folder, name=_read_name(marker))
    raise NotInLab(
        f"not inside a StarForge lab: no {MARKER} in {here} or any folder above it",
        hint="run `sf init` to create a lab, or cd into one",
    )


def _read_name(marker: Path) -> str:
    try:
        data = load_yaml(marker.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProjectError(f"{marker} is not valid YAML: {exc}") from exc
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str):
        raise ProjectError(f"{marker} has no `name:`", hint="add `name: my-lab` to it")
    return check_name("project", name)


def _git(root: Path, *args: str) -> None:
    result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if result.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed: {result.stderr.strip()}")


def project_name_for(folder: str) -> str:
    """A valid project name from a folder's name: ``my lab`` becomes ``my-lab``.

    Runs of characters a name may not hold become one ``-``; a name that stays invalid (nothing
    but such characters) is refused with a hint to pass ``--name``.
    """
    if SAFE_SEGMENT.match(folder) and folder not in {".", ".."}:
        return folder
    derived = re.sub(r"[^A-Za-z0-9._-]+", "-", folder).strip("-._")[:100].rstrip("-._")
    return _checked(derived or folder, f"cannot name the project after the folder {folder!r}")


def _checked(name: str, why: str | None = None) -> str:
    try:
        return check_name("project", name)
    except InvalidName as err:
        raise InvalidName(
            why or err.message,
            hint=f"give one with --name, e.g. --name my-lab; {err.hint}",
            details=err.details,
        ) from None


def init_lab(directory: Path, name: str | None = None) -> Lab:
    """Scaffold a lab in ``directory``: marker, folders, .gitignore, git repo, first commit.

    Without ``name`` the project is named after the folder, made valid (:func:`project_name_for`).
    """
    directory = directory.resolve()
    project = _checked(name) if name is not None else project_name_for(directory.name)
    if (directory / MARKER).exists():
        raise LabExists(
            f"{directory} is already a lab ({MARKER} exists)",
            hint="use it as it is, or pick another folder",
        )
    clashes = [d for d in LAB_DIRS if (directory / d).exists()]
    if clashes:
        raise LabExists(
            f"{directory} already has {', '.join(clashes)}/: refusing to overwrite",
            hint="pick an empty or new folder",
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text(
        f"# The console groups runs by this name.\nname: {project}\n"
        f"created_by: starforge {__version__}\n"
    )
    for sub in LAB_DIRS:
        (directory / sub).mkdir()
        (directory / sub / ".gitkeep").write_text("")
    (directory / ".gitignore").write_text(LAB_GITIGNORE)
    (directory / "README.md").write_text(
        f"# {project}\n\nA StarForge lab. `sf new NAME --method trl/grpo` adds an experiment; "
        "`sf submit NAME --profile h200:1 ...` runs it.\n"
    )
    if not (directory / ".git").exists():
        _git(directory, "init", "-q", "-b", "main")
    if not _has_identity(directory):
        # Provenance needs a commit; a fresh machine may have no git identity yet.
        _git(directory, "config", "user.name", "StarForge")
        _git(directory, "config", "user.email", "starforge@localhost")
    _git(directory, "add", "-A")
    _git(directory, "commit", "-q", "-m", "Start a StarForge lab")
    return Lab(root=directory, name=project)


def _has_identity(root: Path) -> bool:
    result = subprocess.run(["git", "config", "user.email"], cwd=root, capture_output=True)
    return result.returncode == 0 and bool(result.stdout.strip())

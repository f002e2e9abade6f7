"""``sf new``: an experiment is its method's template plus its framework's shared files, copied
once into the lab so that it runs on its own; a fork copies its origin whole."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from starforge.catalog.loader import CATALOG_ROOT, SHARED_DIR, all_methods
from starforge.project import git, packer
from starforge.project.experiments import load_experiment, new_experiment
from starforge.project.lab import Lab

SHARED_TRL = CATALOG_ROOT / "trl" / SHARED_DIR / "trl_support.py"
TRL_METHODS = [m for m in all_methods() if m.startswith("trl/")]


@pytest.mark.parametrize("method", TRL_METHODS)
def test_a_trl_experiment_gets_the_shared_module_its_scripts_import(
    new_lab: Callable[..., Lab], method: str
) -> None:
    lab = new_lab(experiments_={"demo": method})
    exp = load_experiment(lab, "demo").path
    assert (exp / "trl_support.py").read_bytes() == SHARED_TRL.read_bytes()
    for script in ("train.py", "prepare.py"):
        assert "from trl_support import " in (exp / script).read_text()


def test_no_template_file_is_replaced_by_its_frameworks_shared_files() -> None:
    for method in all_methods().values():
        *shared, template = method.template_dirs
        own = {p.relative_to(template) for p in template.rglob("*") if p.is_file()}
        for folder in shared:
            given = {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()}
            assert not own & given, method.id


def test_a_framework_without_shared_files_gives_only_its_template(
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"demo": "verl/grpo"})
    exp = load_experiment(lab, "demo").path
    made = {p.name for p in exp.iterdir()} - {"method.lock.json"}
    assert made == {p.name for p in all_methods()["verl/grpo"].template_dir.iterdir()}


def test_a_fork_keeps_its_origins_copy_of_the_shared_module(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"demo": "trl/sft"})
    edited = load_experiment(lab, "demo").path / "trl_support.py"
    edited.write_text(edited.read_text() + "\n# tuned in this lab\n")

    fork = new_experiment(lab, "fork", source="demo")

    assert (fork.path / "trl_support.py").read_text() == edited.read_text()


def test_the_shared_module_travels_in_the_experiments_package(
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"demo": "trl/grpo"})
    exp = load_experiment(lab, "demo")
    state = git.read_state(lab.root, [exp.relpath, *packer.SHARED_DIRS])
    manifest = packer.build_manifest(lab.root, state.tracked + state.untracked)
    packed = {f.path for f in manifest.files}
    assert {f"{exp.relpath}/{name}" for name in ("train.py", "trl_support.py")} <= packed

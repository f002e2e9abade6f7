"""The local half of ``sf submit``: every refusal happens before anything leaves the machine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli.submit_flow import SubmitOptions, prepare
from starforge.contract.errors import DirtyTree, LockError, MissingInput, SensitiveFiles
from starforge.project.lab import Lab
from tests.conftest import commit_all, git


def opts(root: Path, exp: str = "c1", **kw: object) -> SubmitOptions:
    kw.setdefault("image", "registry.example/train:v1")
    if exp.startswith("c"):  # the custom/custom experiments here: their curves are external
        kw.setdefault("observability_url", "https://wandb.example/team/lab")
    return SubmitOptions(experiment=exp, profiles=["h200:1"], cwd=root, **kw)  # type: ignore[arg-type]


def test_a_clean_experiment_packs_its_files_common_and_configs(
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom", "c2": "custom/custom"})
    (lab.root / "common" / "util.py").write_text("X = 1\n")
    (lab.root / "README.md").write_text("changed, but not packed\n")
    commit_all(lab.root)
    got = prepare(opts(lab.root))
    paths = {f.path for f in got.manifest.files}
    assert "experiments/c1/train.sh" in paths
    assert "common/util.py" in paths
    assert not any(p.startswith("experiments/c2/") for p in paths)
    assert got.spec.provenance.git_commit == git(lab.root, "rev-parse", "HEAD").strip()
    assert len(got.spec.provenance.git_commit) == 40
    assert got.spec.project == lab.name


def test_dirty_tree_is_refused_without_allow_dirty(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    (lab.root / "experiments" / "c1" / "train.sh").write_text("echo changed\n")
    with pytest.raises(DirtyTree) as err:
        prepare(opts(lab.root))
    assert "experiments/c1/train.sh" in err.value.message
    assert "--allow-dirty" in (err.value.hint or "")


def test_dirty_tree_is_accepted_with_allow_dirty_and_recorded(
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    (lab.root / "experiments" / "c1" / "train.sh").write_text("echo changed\n")
    got = prepare(opts(lab.root, allow_dirty=True))
    assert got.spec.provenance.git_dirty
    assert any("uncommitted" in w for w in got.warnings)


def test_untracked_files_are_warned_about_and_travel(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    (lab.root / "experiments" / "c1" / "notes.txt").write_text("new\n")
    got = prepare(opts(lab.root))
    assert not got.spec.provenance.git_dirty
    assert got.spec.provenance.untracked == ["experiments/c1/notes.txt"]
    assert any("notes.txt" in w for w in got.warnings)


def test_secret_file_is_refused_even_with_allow_dirty(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    # Force-add past .gitignore: a tracked secret must be refused too.
    (lab.root / "experiments" / "c1" / "hf_token.txt").write_text("hf_xxx")
    (lab.root / "common" / "secrets.yaml").write_text("k: v")
    git(lab.root, "add", "-f", "experiments/c1/hf_token.txt")
    with pytest.raises(SensitiveFiles) as err:
        prepare(opts(lab.root, allow_dirty=True))
    assert err.value.details["files"] == ["common/secrets.yaml", "experiments/c1/hf_token.txt"]


def test_trl_methods_need_model_and_data_flags(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    with pytest.raises(MissingInput) as err:
        prepare(opts(lab.root, exp="g1", model="org/model"))
    assert err.value.details["missing"] == ["--train-data", "--validation-data"]


def test_data_files_travel_whether_or_not_git_tracks_them(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    (lab.root / "data").mkdir()
    for name in ("train.jsonl", "val.jsonl"):
        (lab.root / "data" / name).write_text('{"prompt": "a"}\n')
    got = prepare(
        opts(
            lab.root,
            exp="g1",
            model="org/model",
            train_data="data/train.jsonl",
            validation_data="data/val.jsonl",
        )
    )
    paths = {f.path for f in got.manifest.files}
    assert {"data/train.jsonl", "data/val.jsonl"} <= paths
    assert got.spec.inputs.train_data and got.spec.inputs.train_data.value == "data/train.jsonl"


def test_upgrade_recipe_rewrites_an_incompatible_lock_before_provenance(
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    lock = lab.root / "experiments/g1/method.lock.json"
    data = json.loads(lock.read_text())
    data["method"]["bindings"]["learning_rate"]["type"] = "int"
    lock.write_text(json.dumps(data))
    commit_all(lab.root, "an old lock")
    (lab.root / "data").mkdir()
    for name in ("t.jsonl", "v.jsonl"):
        (lab.root / "data" / name).write_text('{"prompt": "a"}\n')
    inputs = {"model": "org/model", "train_data": "data/t.jsonl", "validation_data": "data/v.jsonl"}
    with pytest.raises(LockError, match="changed type from int to float"):
        prepare(opts(lab.root, exp="g1", **inputs))
    with pytest.raises(DirtyTree, match=r"method\.lock\.json"):
        prepare(opts(lab.root, exp="g1", upgrade_recipe=True, **inputs))
    commit_all(lab.root, "upgrade the lock")
    got = prepare(opts(lab.root, exp="g1", **inputs))
    assert got.spec.method.bindings["learning_rate"].type == "float"

"""A platform dataset end to end: the tiny prompts pushed once, a ``trl/grpo`` experiment that
names the dataset in its config trains on it (the job sees ``<NAME>_DATA_DIR``), and
``--train-dataset`` overrides the config with the exact version recorded on the run."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]


def test_a_grpo_run_trains_on_a_pushed_dataset_named_in_its_config(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "g1", "trl/grpo")
    prepare_experiment(lab.root, "g1")
    pushed = sf("dataset", "push", "tiny-prompts", "v1", str(lab.root / "data"), "--json")
    assert pushed.code == 0, pushed.err
    first = pushed.json()
    assert isinstance(first, dict) and first["created"] and first["files_uploaded"] == 2
    owner = str(first["ref"]).split("/", 1)[0]
    again = sf("dataset", "push", "tiny-prompts", "v1", str(lab.root / "data"), "--json").json()
    assert isinstance(again, dict) and (again["created"], again["bytes_uploaded"]) == (False, 0)

    exp = lab.root / "experiments" / "g1"
    (exp / "config.yaml").write_text(
        (exp / "config.yaml").read_text() + f"data:\n  train:\n    dataset: {owner}/tiny-prompts\n"
    )
    train = exp / "train.py"  # the job says which data folder it was given
    train.write_text(
        train.read_text().replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nimport os as _os\n\n"
            "print('[data-dir]', _os.environ.get('TINY_PROMPTS_DATA_DIR'), flush=True)\n",
            1,
        )
    )
    (lab.root / "data" / "train.jsonl").unlink()  # the lab's copy is not what trains
    commit_all(lab.root, "g1 on the platform dataset")
    args = ["--profile", "h200:1", "--model", "models/tiny-llama"]
    data = ["--train-data", "train.jsonl", "--validation-data", "val.jsonl"]
    got = sf("submit", "g1", *args, *data, "--follow", cwd=lab.root)
    assert got.code == 0, got.err + got.out[-3000:]
    assert f"fetched dataset {owner}/tiny-prompts@v1" in got.out
    data_dir = next(ln for ln in got.out.splitlines() if ln.startswith("[data-dir] "))
    assert data_dir.endswith(f"/cache/datasets/{owner}/tiny-prompts/v1")
    summary = json.loads(
        next(ln for ln in got.out.splitlines() if ln.startswith("[summary] ")).removeprefix(
            "[summary] "
        )
    )
    assert summary["final_reward"] > summary["first_reward"]

    # A second version; the flag overrides the config, and the run records what it resolved.
    (lab.root / "data" / "train.jsonl").write_text('{"prompt": "aaaa"}\n' * 8)
    assert sf("dataset", "push", "tiny-prompts", "v2", str(lab.root / "data")).code == 0
    over = sf(
        "submit", "g1", *args, *data, "--train-dataset", f"{owner}/tiny-prompts@v2", "--json",
        cwd=lab.root,
    ).json()  # fmt: skip
    assert isinstance(over, dict)
    view = sf("job", "status", str(over["run_id"]), "--json").json()
    assert isinstance(view, dict)
    assert view["datasets"] == {
        "train_data": f"{owner}/tiny-prompts@v2",
        "validation_data": f"{owner}/tiny-prompts@v2",
    }
    sf("job", "stop", str(over["run_id"]))
    wait_for(sf, str(over["run_id"]), {"stopped", "failed", "succeeded"})

    missing = sf("submit", "g1", *args, "--train-data", "trian.jsonl", *data[2:], cwd=lab.root)
    assert missing.code == 2 and "did you mean train.jsonl" in missing.err

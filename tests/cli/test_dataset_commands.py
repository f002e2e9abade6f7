"""``sf dataset`` and the dataset references of ``sf submit``: what is uploaded, what is refused.

The pushes talk to the app in process (FastAPI's TestClient as the client's transport: no
sockets); the refusals that need no server are run as ``sf`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from starforge.cli.cmd_dataset import push_folder
from starforge.cli.submit_flow import SubmitOptions, prepare
from starforge.client import datasets as api
from starforge.client.http import Client
from starforge.contract.api import API_PREFIX
from starforge.contract.datasets import DatasetRef
from starforge.contract.errors import DatasetVersionExists, SensitiveFiles, UsageError
from starforge.contract.jobspec import InputKind
from starforge.project import packer
from starforge.project.lab import Lab
from starforge.server.settings import Settings
from tests.cli.test_usage_errors import one_line_usage_error
from tests.conftest import Result, commit_all
from tests.security.conftest import ALICE, client_for


@pytest.fixture
def alice(tmp_path: Path) -> Iterator[Client]:
    """Alice's client, talking to an app in this process."""
    from starforge.server.settings import load_settings
    from tests.server.factories import INVENTORY, PROFILES

    settings: Settings = load_settings(
        tmp_path / "home", inventory=INVENTORY, profiles=PROFILES, embedded=False
    )
    with client_for(settings) as app_client:
        client = Client(str(app_client.base_url).removesuffix(API_PREFIX))
        client._http = TestClient(app_client.app, base_url=str(app_client.base_url), headers=ALICE)
        yield client


def folder(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


PROMPTS = {"train.jsonl": '{"prompt": "a"}\n' * 50, "val/val.jsonl": '{"prompt": "b"}\n'}


def test_only_missing_blobs_are_uploaded_and_an_identical_push_uploads_nothing(
    alice: Client, tmp_path: Path
) -> None:
    data = folder(tmp_path / "prompts", PROMPTS)
    first = push_folder(alice, "prompts", "v1", data, readme="tiny prompts")
    assert (first.ref, first.created, first.files_uploaded) == ("alice/prompts@v1", True, 2)
    assert first.bytes_uploaded == first.total_bytes and first.bytes_skipped == 0

    again = push_folder(alice, "prompts", "v1", data)
    assert (again.created, again.files_uploaded, again.bytes_uploaded) == (False, 0, 0)

    (data / "val" / "val.jsonl").write_text('{"prompt": "c"}\n')
    second = push_folder(alice, "prompts", "v2", data)
    assert second.created and second.files_uploaded == 1
    assert second.bytes_uploaded == 16 and second.bytes_skipped == len(PROMPTS["train.jsonl"])
    shown = api.show(alice, DatasetRef(owner="alice", name="prompts", version="v1"))
    assert [f.path for f in shown.files] == ["train.jsonl", "val/val.jsonl"]
    assert shown.readme == "tiny prompts"


def test_other_files_under_an_existing_version_are_refused_before_any_upload(
    alice: Client, tmp_path: Path
) -> None:
    data = folder(tmp_path / "prompts", PROMPTS)
    push_folder(alice, "prompts", "v1", data)
    (data / "train.jsonl").write_text('{"prompt": "new"}\n')
    with pytest.raises(DatasetVersionExists, match="alice/prompts@v1 exists with other files"):
        push_folder(alice, "prompts", "v1", data)
    kept = api.show(alice, DatasetRef(owner="alice", name="prompts", version="v1"))
    assert kept.total_bytes == sum(len(t) for t in PROMPTS.values())  # as it was
    new = packer.build_manifest(data, ["train.jsonl"]).files[0].sha256
    assert alice.missing_blobs([new]) == [new]  # the new file was never uploaded


def test_an_empty_folder_or_one_with_a_secret_is_refused_and_creates_nothing(
    alice: Client, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="is empty"):
        push_folder(alice, "d", "v1", tmp_path / "empty")
    data = folder(tmp_path / "leaky", {"train.jsonl": "{}\n", ".env": "HF_TOKEN=x\n"})
    with pytest.raises(SensitiveFiles, match=r"\.env"):
        push_folder(alice, "d", "v1", data)
    assert api.list_versions(alice).versions == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["dataset", "push", "bad/name", "v1", "."], "is not a dataset reference"),
        (["dataset", "push", "d", "v 1", "."], "is not a dataset reference"),
        (["dataset", "push", "d", "v1", "no-such-dir"], "no such folder"),
        (["dataset", "show", "a/b/c"], "is not a dataset reference"),
    ],
)
def test_malformed_dataset_commands_exit_2_with_one_line(
    sf: Callable[..., Result], sf_home: Path, args: list[str], needle: str
) -> None:
    assert needle in one_line_usage_error(sf(*args))
    assert not (sf_home / "server" / "server.json").exists()  # no server was started for it


def test_an_empty_folder_is_refused_before_any_server_is_asked(
    sf: Callable[..., Result], sf_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    assert "is empty" in one_line_usage_error(
        sf("dataset", "push", "d", "v1", str(tmp_path / "empty"))
    )
    assert not (sf_home / "server" / "server.json").exists()


def _grpo_lab(new_lab: Callable[..., Lab], config_extra: str = "") -> Lab:
    lab = new_lab(experiments_={"g": "trl/grpo"})
    if config_extra:
        config = lab.root / "experiments" / "g" / "config.yaml"
        config.write_text(config.read_text() + config_extra)
        commit_all(lab.root)
    return lab


def _opts(lab: Lab, **kw: object) -> SubmitOptions:
    return SubmitOptions(
        experiment="g",
        profiles=["h200:1"],
        cwd=lab.root,
        model="org/tiny",
        **kw,  # type: ignore[arg-type]
    )


def test_the_config_names_the_dataset_and_the_flag_overrides_it(
    new_lab: Callable[..., Lab],
) -> None:
    lab = _grpo_lab(new_lab, "data:\n  train:\n    dataset: alice/prompts@v1\n")
    got = prepare(_opts(lab, train_data="train.jsonl", validation_data="val/val.jsonl"))
    train, val = got.spec.inputs.train_data, got.spec.inputs.validation_data
    assert train is not None and val is not None
    assert (train.kind, train.value, train.dataset) == (
        InputKind.DATASET, "train.jsonl", "alice/prompts@v1",
    )  # fmt: skip
    assert (val.kind, val.value, val.dataset) == (
        InputKind.DATASET, "val/val.jsonl", "alice/prompts@v1",
    )  # fmt: skip
    assert not any(f.path.endswith("train.jsonl") for f in got.manifest.files)

    over = prepare(
        _opts(lab, train_data="train.jsonl", validation_data="val/val.jsonl",
              train_dataset="bob/other")
    )  # fmt: skip
    assert over.spec.inputs.train_data is not None
    assert over.spec.inputs.train_data.dataset == "bob/other"


def test_a_malformed_reference_in_the_config_or_a_flag_is_a_usage_error(
    new_lab: Callable[..., Lab],
) -> None:
    lab = _grpo_lab(new_lab, "data:\n  train:\n    dataset: just-a-name\n")
    with pytest.raises(UsageError, match=r"data\.train\.dataset: 'just-a-name'") as err:
        prepare(_opts(lab, train_data="train.jsonl", validation_data="v.jsonl"))
    assert err.value.exit_code == 2
    with pytest.raises(UsageError, match=r"--train-dataset: 'a/b@'"):
        prepare(_opts(lab, train_data="t.jsonl", validation_data="v.jsonl", train_dataset="a/b@"))
    with pytest.raises(UsageError, match="a path inside it"):
        prepare(_opts(lab, train_data="../t.jsonl", validation_data="v.jsonl", train_dataset="a/b"))


def test_an_output_dataset_needs_a_version(new_lab: Callable[..., Lab]) -> None:
    lab = _grpo_lab(new_lab)
    with pytest.raises(UsageError, match="name the version to publish") as err:
        prepare(_opts(lab, train_data="t.jsonl", train_dataset="a/b", output_dataset="me/out"))
    assert err.value.exit_code == 2

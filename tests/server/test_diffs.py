"""What differs between runs (``services/observability/diffs``, ``GET /runs-diff``): each kind of
difference shows up in its own section and nowhere else, a parameter is one row (not a second config
row), and a comparison of too many runs, or of another member's run, is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from starforge.contract.api import API_PREFIX, SubmitRequest
from starforge.contract.datasets import DatasetPush
from starforge.contract.diffs import DiffRow, RunDiff
from starforge.contract.errors import CompareRefused, RunNotFound
from starforge.contract.jobspec import FileEntry, InputKind, InputRef, Inputs, JobSpec
from starforge.server.app import create_app
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.data import blobs, datasets
from starforge.server.services.observability import diffs
from starforge.server.services.runs import jobs
from starforge.server.settings import Settings

from .factories import TOKENS, FakeExecutor, member, package, run_row, spec

HUB = InputRef(kind=InputKind.HUB, value="org/data")
TRL_INPUTS = Inputs(
    model=InputRef(kind=InputKind.HUB, value="org/tiny"), train_data=HUB, validation_data=HUB
)
PROMPTS = Inputs(
    train_data=InputRef(kind=InputKind.DATASET, value="train.jsonl", dataset="alice/prompts")
)


def submitted(
    rt: Runtime, user: str = "alice", method_id: str = "custom/custom", **update: Any
) -> str:
    """A run of ``user`` whose spec is the factory's with ``update`` applied (top-level fields;
    ``git_commit`` goes into the provenance)."""
    base = spec(method_id=method_id, inputs=update.pop("inputs", None))
    commit = update.pop("git_commit", None)
    if commit is not None:
        update["provenance"] = base.provenance.model_copy(update={"git_commit": commit})
    req = SubmitRequest(
        spec=JobSpec.model_validate(base.model_copy(update=update).model_dump()),
        manifest=package(rt, "exp", method_id),
        idempotency_key=uuid.uuid4().hex,
    )
    for digest in req.manifest.digests():
        blobs.record(rt, user, digest)
    return jobs.submit(rt, user, req).run_id


def push_prompts(rt: Runtime, version: str) -> None:
    data = f'{{"prompt": "{version}"}}\n'.encode()
    digest = rt.storage.put_bytes(data)
    blobs.record(rt, "alice", digest)
    entry = FileEntry(path="train.jsonl", sha256=digest, size=len(data))
    datasets.push(rt, "alice", DatasetPush(name="prompts", version=version, files=[entry]))


def keys(diff: RunDiff) -> list[tuple[str, str]]:
    return [(row.section, row.key) for row in diff.rows]


def test_runs_that_differ_only_in_learning_rate_differ_in_one_row(rt: Runtime) -> None:
    slow = submitted(
        rt, method_id="trl/sft", inputs=TRL_INPUTS, hyperparams={"learning_rate": 1e-5}
    )
    fast = submitted(
        rt, method_id="trl/sft", inputs=TRL_INPUTS, hyperparams={"learning_rate": 3e-4}
    )
    # The resolved config carries the same value under the parameter's path...
    assert run_row(rt, fast).config["learning_rate"] == 3e-4  # type: ignore[index]

    diff = diffs.compare(rt, member("alice"), [slow, fast])

    # ...and the diff names it once, as the parameter.
    assert diff.rows == [
        DiffRow(section="hyperparams", key="learning_rate", values=["1e-05", "0.0003"])
    ]
    assert diff.runs == [slow, fast] and diff.same > 5


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"git_commit": "b" * 40}, [("commit", "git_commit")]),
        ({"image": "registry.example/train:v2"}, [("image", "image")]),
        ({"profiles": ["h100:8"]}, [("profile", "profiles")]),
    ],
    ids=["commit", "image", "profile"],
)
def test_each_difference_shows_up_in_its_own_section(
    rt: Runtime, change: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    first, second = submitted(rt), submitted(rt, **change)

    diff = diffs.compare(rt, member("alice"), [first, second])

    assert keys(diff) == expected
    (row,) = diff.rows
    assert row.values[0] != row.values[1] and None not in row.values


def test_a_newer_dataset_version_shows_up_in_the_datasets_section_only(rt: Runtime) -> None:
    push_prompts(rt, "v1")
    before = submitted(rt, inputs=PROMPTS)  # "alice/prompts": the latest version then
    push_prompts(rt, "v2")
    after = submitted(rt, inputs=PROMPTS)

    diff = diffs.compare(rt, member("alice"), [before, after])

    assert diff.rows == [
        DiffRow(
            section="datasets",
            key="train_data",
            values=['"alice/prompts@v1"', '"alice/prompts@v2"'],
        )
    ]


def test_a_run_without_a_key_shows_it_as_absent(rt: Runtime) -> None:
    plain = submitted(rt, method_id="trl/sft", inputs=TRL_INPUTS)
    tuned = submitted(rt, method_id="trl/sft", inputs=TRL_INPUTS, hyperparams={"seed": 7})

    rows = {
        (r.section, r.key): r.values
        for r in diffs.compare(rt, member("alice"), [plain, tuned]).rows
    }

    assert rows == {("hyperparams", "seed"): [None, "7"]}


def test_three_runs_are_compared_in_the_order_asked(rt: Runtime) -> None:
    runs = [submitted(rt, git_commit=c * 40) for c in "abc"]

    diff = diffs.compare(rt, member("alice"), [runs[2], runs[0], runs[1]])

    assert diff.runs == [runs[2], runs[0], runs[1]]
    assert diff.rows == [
        DiffRow(section="commit", key="git_commit", values=[f'"{c * 40}"' for c in "cab"])
    ]


@pytest.mark.parametrize("count", [0, 1, 9])
def test_fewer_than_two_or_more_than_eight_runs_are_refused(rt: Runtime, count: int) -> None:
    run = submitted(rt)
    with pytest.raises(CompareRefused, match=f"2 to 8 runs; {count} given"):
        diffs.compare(rt, member("alice"), [run] * count)


def test_another_members_run_is_not_found(rt: Runtime) -> None:
    mine, theirs = submitted(rt), submitted(rt, user="bob")
    with pytest.raises(RunNotFound):
        diffs.compare(rt, member("alice"), [mine, theirs])


# ---- through HTTP -----------------------------------------------------------------------------


@pytest.fixture
def client(settings: Settings, executor: FakeExecutor) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=executor, run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        yield c


def test_the_endpoint_compares_runs_by_prefix_and_refuses_nine_with_a_422(
    client: TestClient,
) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    auth = {"Authorization": f"Bearer {TOKENS['alice']}"}
    first, second = submitted(rt), submitted(rt, git_commit="b" * 40)

    got = client.get("/runs-diff", params={"run": [first[:8], second]}, headers=auth)

    assert got.status_code == 200, got.text
    diff = RunDiff.read(got.content)
    assert diff.runs == [first, second] and keys(diff) == [("commit", "git_commit")]
    nine = client.get("/runs-diff", params={"run": [first] * 9}, headers=auth)
    assert nine.status_code == 422
    assert nine.json()["code"] == "compare.refused"
    assert "2 to 8 runs; 9 given" in nine.json()["message"]

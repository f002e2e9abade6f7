"""The run lifecycle end to end: a real server, real runners, real git, real TRL training.

Pause and resume, stop and retry, a crash and retry, ``kill -9`` of the server while two runs
train, ``kill -9`` of a runner (auto-retry from its checkpoint), a runner that stops beating,
and idempotent submits (concurrent duplicates, and a rerun after a lost answer). The module's
server beats fast (0.5 s heartbeats, lost after 4 s) so the lost-runner cases stay short.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from starforge.cli.main import main
from starforge.client import config
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for
from tests.server.factories import group_exists
from tests.tiny_inputs import prepare_experiment

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
FINAL = {"succeeded", "failed", "stopped"}
TRL_ARGS = [
    "--profile",
    "h200:1",
    "--model",
    "models/tiny-llama",
    "--train-data",
    "data/train.jsonl",
    "--validation-data",
    "data/val.jsonl",
]


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's own server: fast heartbeats, so a lost runner is noticed in seconds."""
    with embedded_server(
        tmp_path_factory.mktemp("sf-home"),
        {"heartbeat_s": 0.5, "lost_after_s": 4, "stop_grace_s": 30, "pause_grace_s": 60},
    ) as home:
        yield home


# ---- helpers ----------------------------------------------------------------------------------


def submit_custom(sf: Callable[..., Result], lab: Lab, *extra: str, profile: str = "h200:1") -> str:
    got = sf(
        "submit", "c1", "--profile", profile, "--image", IMAGE, "--json", *extra, cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err + got.out
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def view_of(sf: Callable[..., Result], run_id: str) -> dict[str, Any]:
    got = sf("job", "status", run_id, "--json")
    assert got.code == 0, got.err
    view = got.json()
    assert isinstance(view, dict)
    return view


def log_of(view: dict[str, Any], attempt: int) -> str:
    path = Path(view["run_dir"]) / "logs" / f"attempt-{attempt}.log"
    return path.read_text() if path.exists() else ""


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 180.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def wait_for_log(sf: Callable[..., Result], run_id: str, pattern: str, attempt: int = 1) -> str:
    found: list[str] = []

    def seen() -> bool:
        match = re.search(pattern, log_of(view_of(sf, run_id), attempt))
        if match:
            found.append(match.group(0))
        return bool(match)

    wait_until(seen, f"{pattern!r} in {run_id}'s log")
    return found[0]


def act(sf: Callable[..., Result], action: str, run_id: str) -> dict[str, Any]:
    got = sf("job", action, run_id, "--json")
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict) and body["accepted"], body
    return body


def steps_in(log: str, pattern: str) -> list[int]:
    return [int(m) for m in re.findall(pattern, log)]


def custom_steps(log: str) -> list[int]:
    return steps_in(log, r"(?m)^step (\d+)/\d+ ")


def trl_steps(log: str) -> list[int]:
    return steps_in(log, r'(?m)^\[metrics\] \{"step":(\d+),')


def runner_pid(view: dict[str, Any], attempt: int = 1) -> int:
    ref = view["attempts"][attempt - 1]["executor_ref"]
    assert ref and ref.startswith("local:"), ref
    return int(ref.removeprefix("local:"))


def trl_lab(new_lab: Callable[..., Lab]) -> Lab:
    lab = new_lab("trl-lab")
    experiments.new_experiment(lab, "g1", "trl/grpo")
    prepare_experiment(lab.root, "g1")
    commit_all(lab.root, "add g1")
    return lab


def submit_trl(sf: Callable[..., Result], lab: Lab, max_steps: int) -> str:
    sets = ["-s", f"max_steps={max_steps}", "-s", "save_steps=5", "-s", "eval_steps=1000"]
    got = sf("submit", "g1", *TRL_ARGS, *sets, "--json", cwd=lab.root)
    assert got.code == 0, got.err + got.out
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


# ---- pause / resume, stop / retry, crash / retry -----------------------------------------------


@pytest.mark.training
def test_pause_then_resume_finishes_with_the_step_count_of_an_uninterrupted_run(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], custom_lab: Callable[..., Lab]
) -> None:
    lab = trl_lab(new_lab)
    run_id = submit_trl(sf, lab, max_steps=40)
    wait_for_log(sf, run_id, r'\[metrics\] \{"step":12,')
    paused = act(sf, "pause", run_id)
    assert paused["status"] == "pausing"
    view = wait_for(sf, run_id, {"paused", *FINAL})
    assert (view["status"], view["end_reason"], view["exit_code"]) == (
        "paused",
        "paused_by_user",
        143,
    )
    kept = int(re.search(r"checkpoint-(\d+) \(step", view["reason"]).group(1))  # type: ignore[union-attr]
    assert kept >= 12
    pgid = runner_pid(view)
    wait_until(lambda: not group_exists(pgid), "the runner to exit after its last report")

    # Its GPU is free: a run that needs both h200 nodes whole starts and ends while it is paused.
    wide = custom_lab(name="c1", steps=2)
    wide_id = submit_custom(sf, wide, profile="h200:16")
    assert wait_for(sf, wide_id, FINAL)["status"] == "succeeded"
    assert view_of(sf, run_id)["status"] == "paused"

    resumed = act(sf, "resume", run_id)
    assert resumed["message"].endswith(f"it continues from checkpoint-{kept} (step {kept})")
    view = wait_for(sf, run_id, FINAL, timeout=300)
    assert view["status"] == "succeeded", log_of(view, 2)[-3000:]
    first, second = view["attempts"]
    assert (first["end_reason"], second["end_reason"]) == ("paused_by_user", "completed")
    assert second["resumed_from"].endswith(f"checkpoints/checkpoint-{kept}")
    one, two = trl_steps(log_of(view, 1)), trl_steps(log_of(view, 2))
    assert one[:kept] == list(range(1, kept + 1))
    assert two == list(range(kept + 1, 41))  # the step counter continued
    assert sorted(set(one) | set(two)) == list(range(1, 41))  # a continuous series
    summary = json.loads((Path(view["run_dir"]) / "out" / "summary.json").read_text())
    assert summary["steps"] == 40  # what an uninterrupted run does


def test_stop_then_retry_continues_from_the_checkpoint(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=40, step_seconds=0.1, resumed_step_seconds=0.01)
    run_id = submit_custom(sf, lab)
    wait_for_log(sf, run_id, r"step 12/40")
    assert act(sf, "stop", run_id)["status"] == "stopping"
    view = wait_for(sf, run_id, FINAL)
    assert (view["status"], view["end_reason"], view["exit_code"]) == (
        "stopped",
        "stopped_by_user",
        143,
    )
    saved = max(int(n) for n in re.findall(r"\[checkpoint\] \S+/step-(\d+)", log_of(view, 1)))
    assert saved >= 12

    retried = act(sf, "retry", run_id)
    assert retried["message"].endswith(f"it continues from step-{saved} (step {saved})")
    view = wait_for(sf, run_id, FINAL)
    assert view["status"] == "succeeded" and len(view["attempts"]) == 2
    assert view["attempts"][1]["resumed_from"].endswith(f"checkpoints/step-{saved}")
    assert f"[resume] from {view['attempts'][1]['resumed_from']} (step {saved})" in log_of(view, 2)
    assert custom_steps(log_of(view, 1)) == list(range(1, saved + 1))
    assert custom_steps(log_of(view, 2)) == list(range(saved + 1, 41))
    history = sf("job", "logs", run_id, "-n", "0", "--no-follow")
    assert history.code == 0 and "attempt 2" in history.out
    assert "step 1/40" in history.out and "step 40/40" in history.out


def test_a_training_crash_fails_without_auto_retry_and_retry_resumes_it(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=20, step_seconds=0.05)
    script = lab.root / "experiments" / "c1" / "train.sh"
    text = script.read_text()
    crash = '    if [[ "$FORGE_ATTEMPT" == 1 && $step == 12 ]]; then echo "boom" >&2; exit 3; fi\n'
    marker = '    echo "step $step/$STEPS loss $(loss_at "$step")"\n'
    assert marker in text
    script.write_text(text.replace(marker, marker + crash))
    commit_all(lab.root, "crash once")
    run_id = submit_custom(sf, lab)
    view = wait_for(sf, run_id, FINAL)
    assert (view["status"], view["end_reason"], view["exit_code"]) == ("failed", "exit_nonzero", 3)
    assert [e["actor"] for e in view["events"]].count("auto-retry") == 0
    assert "boom" in log_of(view, 1)

    act(sf, "retry", run_id)
    view = wait_for(sf, run_id, FINAL)
    assert view["status"] == "succeeded"
    assert view["attempts"][1]["resumed_from"].endswith("checkpoints/step-10")
    assert custom_steps(log_of(view, 2)) == list(range(11, 21))
    shown = sf("job", "status", run_id)
    assert shown.code == 0 and "exit_nonzero" in shown.out and "step-10" in shown.out
    again = sf("job", "retry", run_id)  # a rejection is an answer, not an error
    assert again.code == 0 and f"not retried: run {run_id} already succeeded" in again.out


# ---- crashes: the server, a runner ------------------------------------------------------------


@pytest.mark.training
def test_kill_9_of_the_server_while_two_runs_train_loses_nothing_and_starts_nothing_twice(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], server_home: Path
) -> None:
    lab = trl_lab(new_lab)
    runs = [submit_trl(sf, lab, max_steps=30) for _ in range(2)]
    for run_id in runs:
        wait_for_log(sf, run_id, r'\[metrics\] \{"step":3,')
    info = config.read_server_file(server_home)
    assert info is not None
    os.kill(int(str(info["pid"])), signal.SIGKILL)
    time.sleep(1.0)  # both keep training with nobody listening
    assert main(["server", "start"]) == 0
    again = config.read_server_file(server_home)
    assert again is not None
    moved = again["url"] != info["url"]  # it comes back on its port when that is still free

    for run_id in runs:
        view = wait_for(sf, run_id, FINAL, timeout=300)
        log = log_of(view, 1)
        assert view["status"] == "succeeded", log[-3000:]
        assert len(view["attempts"]) == 1  # started once
        assert [e["dst"] for e in view["events"]].count("starting") == 1
        state = Path(view["run_dir"]) / "state"
        assert sorted(p.name for p in state.glob("*.runner.json")) == [
            "attempt-1.node-0.runner.json"
        ]
        record = json.loads((state / "attempt-1.node-0.runner.json").read_text())
        assert record["pid"] == runner_pid(view)
        assert trl_steps(log) == list(range(1, 31))  # every step's line, once, in order
        # The runner kept its reports while nobody listened and followed the beacon to the new
        # server (when it came back elsewhere). The exit reaches it from the runner's report or,
        # if the reconciler looks first, from the exit record the runner wrote: either way from
        # the runner, never guessed.
        assert "reports are kept and retried" in log
        assert ("the server moved to" in log) == moved
        assert view["events"][-1]["actor"] in {"runner:0", "reconciler"}
        assert view["exit_code"] == 0
        served = sf("job", "logs", run_id, "-n", "0", "--no-follow", "--json").json()
        assert isinstance(served, dict)
        text = served["attempts"][0]["log"]
        assert len(text.splitlines()) == len(log.splitlines())  # the API serves every line


def test_kill_9_of_a_runner_is_node_lost_then_an_auto_retry_from_its_checkpoint(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=60, step_seconds=0.1, resumed_step_seconds=0.01)
    run_id = submit_custom(sf, lab)
    wait_for_log(sf, run_id, r"\[checkpoint\] \S+/step-10")
    pgid = runner_pid(view_of(sf, run_id))
    os.kill(pgid, signal.SIGKILL)  # the runner only: its training lives on in the group

    wait_until(lambda: len(view_of(sf, run_id)["attempts"]) == 2, "the auto-retry")
    wait_until(lambda: not group_exists(pgid), "the lost runner's group to be killed")
    view = wait_for(sf, run_id, FINAL)
    assert view["status"] == "succeeded", log_of(view, 2)[-2000:]
    first, second = view["attempts"]
    assert first["end_reason"] == "node_lost" and first["exit_code"] is None
    retry = next(e for e in view["events"] if e["actor"] == "auto-retry")
    assert retry["reason"].startswith("auto-retry 1 of 2 after node_lost: resumes from step-")
    resumed = int(second["resumed_from"].rsplit("-", 1)[1])
    assert resumed >= 10
    assert custom_steps(log_of(view, 2)) == list(range(resumed + 1, 61))
    assert view["auto_retries"] == 1 and view["max_retries"] == 2


def test_a_runner_that_stops_beating_is_lost_and_fails_with_no_retry_left(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=600, step_seconds=0.1)
    run_id = submit_custom(sf, lab, "--max-retries", "0")
    wait_for_log(sf, run_id, r"\[checkpoint\] \S+/step-5")
    pgid = runner_pid(view_of(sf, run_id))
    os.kill(pgid, signal.SIGSTOP)  # alive to the OS, silent to the server
    try:
        view = wait_for(sf, run_id, FINAL, timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed as lost, as it should be
            os.kill(pgid, signal.SIGCONT)
    assert (view["status"], view["end_reason"]) == ("failed", "node_lost")
    assert "no heartbeat for" in view["reason"]
    assert view["reason"].endswith("not retried: auto-retries used up (none allowed)")
    wait_until(lambda: not group_exists(pgid), "the silent runner's group to be killed")


# ---- idempotent submit -------------------------------------------------------------------------


def prepared_request(lab: Lab, key: str) -> Any:
    from starforge.cli import submit_flow
    from starforge.client.http import Client
    from starforge.contract.api import SubmitRequest

    opts = submit_flow.SubmitOptions(
        experiment="c1",
        profiles=["h200:1"],
        image=IMAGE,
        cwd=lab.root,
    )
    prepared = submit_flow.prepare(opts)
    info = config.read_server_file()
    assert info is not None
    client = Client(str(info["url"]), token=config.read_local_token())
    for entry in prepared.manifest.files:
        if client.missing_blobs([entry.sha256]):
            client.upload_blob(entry.sha256, lab.root / entry.path)
    return client, SubmitRequest(
        spec=prepared.spec, manifest=prepared.manifest, idempotency_key=key
    )


def test_concurrent_duplicate_submits_with_one_key_make_one_run(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=1)
    client, request = prepared_request(lab, "dup-" + os.urandom(8).hex())
    with client, ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: client.submit(request), range(8)))
    assert len({a.run_id for a in answers}) == 1
    assert sum(a.created for a in answers) == 1
    ours = [
        r for r in sf("job", "ls", "--json", "-n", "500").json() if r["run_id"] == answers[0].run_id
    ]  # type: ignore[union-attr]
    assert len(ours) == 1


class DropAnswersToSubmits(BaseHTTPRequestHandler):
    """A network that loses the server's answer to ``POST /jobs`` (after the server got it)."""

    upstream: ClassVar[str] = ""
    swallowed: ClassVar[list[str]] = []

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        answer = httpx.request(
            self.command, self.upstream + self.path, content=body, headers=headers, timeout=60
        )
        if self.command == "POST" and self.path.endswith("/jobs"):
            self.swallowed.append(answer.json()["run_id"])
            self.close_connection = True  # hang up without a word
            return
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in (
                "content-length",
                "transfer-encoding",
                "connection",
                "content-encoding",
            ):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PUT = _forward

    def log_message(self, *_: object) -> None:
        pass


def test_a_rerun_submit_after_a_lost_answer_returns_the_run_instead_of_a_second(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab], monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = custom_lab(steps=1)
    submit_custom(sf, lab)  # uploads the files; an answered submit leaves no pending record
    info = config.read_server_file()
    assert info is not None
    DropAnswersToSubmits.upstream = str(info["url"])
    DropAnswersToSubmits.swallowed = []
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), DropAnswersToSubmits)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("STARFORGE_SERVER", f"http://127.0.0.1:{proxy.server_address[1]}")
        monkeypatch.setenv("STARFORGE_TOKEN", str(config.read_local_token()))
        lost = sf(
            "submit", "c1", "--profile", "h200:1", "--image", IMAGE, cwd=lab.root,
        )  # fmt: skip
        assert lost.code == 1 and "cannot reach" in lost.err
    finally:
        proxy.shutdown()
        monkeypatch.delenv("STARFORGE_SERVER")
        monkeypatch.delenv("STARFORGE_TOKEN")
    swallowed = set(DropAnswersToSubmits.swallowed)
    assert len(swallowed) == 1  # the client's own retry reused the key too
    again = sf(
        "submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root,
    )  # fmt: skip
    assert again.code == 0, again.err
    body = again.json()
    assert isinstance(body, dict)
    assert body["run_id"] in swallowed and body["created"] is False
    fresh = submit_custom(sf, lab)  # answered: the next submission is a new run
    assert fresh not in swallowed

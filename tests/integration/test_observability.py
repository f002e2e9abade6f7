"""Observability end to end with the real server, real runners and real git: curves reported by a
custom job through ``starforge.report`` and by a real TRL run, observability modes at submit, and
the log stream surviving dropped connections without losing or repeating a line.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from starforge.client import config
from starforge.client.http import Client
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
PLATFORM = "starforge:\n  observability: platform\n"

REPORTING_JOB = """#!/usr/bin/env bash
set -euo pipefail
echo "curves go to: ${FORGE_OBSERVABILITY_URL:-the platform}"
python - <<'PY'
import math
import starforge.report as report

report.init(hparams={"lr": 0.01, "model": {"layers": 2}})
for step in range(STEPS):
    report.log({"loss": 2 / math.sqrt(step + 1), "eval": {"acc": step / STEPS}}, step=step)
    print(f"step {step}", flush=True)
report.log({"loss": float("nan")}, step=STEPS)
report.finish()
PY
"""

NUMBERED_JOB = """#!/usr/bin/env bash
for i in $(seq 0 LAST); do
    printf 'line %04d %s\\n' "$i" "........................................"
    if (( i % 25 == 0 )); then sleep 0.05; fi
done
"""


def lab_with(
    new_lab: Callable[..., Lab], name: str, script: str, config_yaml: str | None = PLATFORM
) -> Lab:
    made = new_lab()
    experiments.new_experiment(made, name, "custom/custom")
    folder = made.root / "experiments" / name
    (folder / "train.sh").write_text(script)
    if config_yaml is not None:
        (folder / "config.yaml").write_text(config_yaml)
    commit_all(made.root, f"add {name}")
    return made


def submit(sf: Callable[..., Result], lab: Lab, exp: str, *extra: str) -> Result:
    return sf("submit", exp, "--profile", "h200:1", "--image", IMAGE, *extra, cwd=lab.root)


def client() -> Client:
    info = config.read_server_file()
    assert info is not None
    return Client(str(info["url"]), token=config.read_local_token())


def test_a_custom_job_that_calls_starforge_report_gets_curves_and_hparams(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = lab_with(new_lab, "rep", REPORTING_JOB.replace("STEPS", "12"))
    got = submit(sf, lab, "rep", "--json")
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict) and "/#/runs/" in str(body["console_url"])
    run_id = str(body["run_id"])
    assert wait_for(sf, run_id, {"succeeded", "failed"})["status"] == "succeeded"

    shown = sf("job", "metrics", run_id)
    assert shown.code == 0, shown.err
    assert "loss" in shown.out and "eval/acc" in shown.out and "▁" in shown.out
    series = sf("job", "metrics", run_id, "--json").json()
    assert isinstance(series, dict)
    by_key = {s["key"]: s for s in series["series"]}  # type: ignore[index, union-attr]
    assert by_key["loss"]["count"] == 12 and by_key["loss"]["steps"] == list(range(12))
    assert by_key["eval/acc"]["last_value"] == pytest.approx(11 / 12)
    with client() as c:
        meta = c.run_meta(run_id)
    assert meta.hparams == {"lr": 0.01, "model/layers": 2}
    assert meta.meta["dropped_nonfinite"] == 1 and meta.last_step == 11
    log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert "curves go to: the platform" in log and "dropped a non-finite value" in log


def test_external_observability_needs_its_url_and_the_job_and_status_see_it(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    script = 'echo "curves go to: ${FORGE_OBSERVABILITY_URL:-the platform}"\n'
    lab = lab_with(new_lab, "ext", script, config_yaml=None)
    refused = submit(sf, lab, "ext")
    assert refused.code == 2
    assert "--observability-url is required" in refused.err
    assert "observability: platform" in refused.err  # the hint names the opt-in
    bad = submit(sf, lab, "ext", "--observability-url", "wandb/project")
    assert bad.code == 2 and "not an http(s) URL" in bad.err

    url = "https://wandb.example/team/ext"
    got = submit(sf, lab, "ext", "--observability-url", url, "--follow")
    assert got.code == 0, got.err
    assert f"curves go to: {url}" in got.out
    assert f"curves: {url} (external)" in got.out
    run_id = str(sf("job", "ls", "--json", "--limit", "1").json()[0]["run_id"])  # type: ignore[index]
    status = sf("job", "status", run_id)
    assert f"{url} (external)" in status.out and "/#/runs/" + run_id in status.out


def test_a_platform_method_refuses_an_observability_url(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    for name in ("model/config.json", "train.jsonl", "val.jsonl"):  # the inputs it requires
        (lab.root / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (lab.root / "data" / name).write_text("{}\n")
    commit_all(lab.root, "add inputs")
    got = sf(
        "submit",
        "g1",
        "--profile",
        "h200:1",
        "--model",
        "data/model",
        "--train-data",
        "data/train.jsonl",
        "--validation-data",
        "data/val.jsonl",
        "--observability-url",
        "https://wandb.example/x",
        cwd=lab.root,
    )
    assert got.code == 2, got.err
    assert "--observability-url is not accepted" in got.err


class DroppingProxy:
    """A TCP proxy to the server that cuts each of its first ``drops`` connections after
    ``after_bytes`` bytes of the answer: a network blip in the middle of the stream."""

    def __init__(self, target: str, after_bytes: int, drops: int) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self.target = (host, int(port))
        self.after_bytes, self.drops_left, self.dropped = after_bytes, drops, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            cut = self.drops_left > 0
            self.drops_left -= 1
            threading.Thread(target=self._pump, args=(conn, upstream, None), daemon=True).start()
            limit = self.after_bytes if cut else None
            threading.Thread(target=self._pump, args=(upstream, conn, limit), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while data := src.recv(4096):
                if limit is not None and sent + len(data) > limit:
                    dst.sendall(data[: limit - sent])
                    self.dropped += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy() -> Iterator[Callable[[int, int], DroppingProxy]]:
    made: list[DroppingProxy] = []

    def make(after_bytes: int, drops: int) -> DroppingProxy:
        info = config.read_server_file()
        assert info is not None
        made.append(DroppingProxy(str(info["url"]), after_bytes, drops))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_the_log_stream_resumes_after_dropped_connections_without_losing_a_line(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    proxy: Callable[[int, int], DroppingProxy],
) -> None:
    lines = 400
    lab = lab_with(new_lab, "num", NUMBERED_JOB.replace("LAST", str(lines - 1)))
    run_id = str(submit(sf, lab, "num", "--json").json()["run_id"])  # type: ignore[index]
    blip = proxy(3000, 4)
    received: list[str] = []
    with Client(blip.url, token=config.read_local_token()) as c:
        events = c.stream_logs(run_id)
        for event in events:
            if event.event == "log":
                received.append(event.json()["text"])
            if event.event == "end":
                assert event.json()["status"] == "succeeded"
                break
        reconnects = events.reconnects
    assert blip.dropped >= 3 and reconnects >= 3
    numbered = [ln for ln in "".join(received).splitlines() if ln.startswith("line ")]
    assert [int(ln.split()[1]) for ln in numbered] == list(range(lines))
    whole = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert "".join(received) == whole


@pytest.mark.training
def test_a_real_trl_run_reports_its_curves_through_the_callback(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "g1", "trl/grpo")
    prepare_experiment(lab.root, "g1")
    commit_all(lab.root, "add g1")
    got = sf(
        "submit",
        "g1",
        "--profile",
        "h200:1",
        "--model",
        "models/tiny-llama",
        "--train-data",
        "data/train.jsonl",
        "--validation-data",
        "data/val.jsonl",
        "-s",
        "max_steps=6",
        "--json",
        cwd=lab.root,
    )
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, run_id, {"succeeded", "failed"}, timeout=300)["status"] == "succeeded"
    printed = [
        json.loads(ln.removeprefix("[metrics] "))
        for ln in sf("job", "logs", run_id, "-n", "0", "--no-follow").out.splitlines()
        if ln.startswith("[metrics] ")
    ]
    with client() as c:
        view = c.metrics(run_id)
        meta = c.run_meta(run_id)
    by_key = {s.key: s for s in view.series}
    assert by_key["loss"].steps == [1, 2, 3, 4, 5, 6] == [m["step"] for m in printed]
    assert by_key["reward"].values == pytest.approx([m["reward"] for m in printed], abs=1e-5)
    assert meta.hparams["learning_rate"] == 0.02 and meta.hparams["max_steps"] == 6
    assert "train_runtime" in meta.meta["summary"] and meta.last_step == 6

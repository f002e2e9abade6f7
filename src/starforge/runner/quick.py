"""A cold runner's quick start: the job first, from the plan the server compiled, reports after.

A runner that Slurm starts is a fresh interpreter; importing pydantic with the contract's
models, the catalog (with yaml) and the HTTP client costs it more than everything else before
its job's first line. When the binding carries the launch plan
(:class:`~starforge.contract.env.PlannedLaunch`, compiled at dispatch by
``catalog/adapters/planned.py``), the server unpacked the package into the work dir, and the
plan's assumptions hold on this node (this interpreter, this ``PATH``), the runner reads the
binding as plain JSON, writes its runner record, checks the runtime's packages, writes the plan's
files and starts the job, with the standard library and this package's plain modules only. Then
:func:`starforge.runner.main.carry_on` reads the binding strictly and does the rest as any
runner: ``starting`` and ``running``, the check that the server answers (a job whose runner
cannot reach it is terminated: the attempt fails at its start, as it would have), the wait and
the exit.

Anything else (no plan, a plan for another interpreter, a work dir that is not the plan's, a
binding this reader does not understand) starts nothing here: the full runner compiles its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from starforge.contract.errors import StarForgeError
from starforge.contract.layout import UNPACKED_MARKER
from starforge.runner import container, records, slurm


@dataclass(frozen=True)
class Node:
    """What the quick start reads of a binding and its plan (the binding's field names)."""

    run_id: str
    attempt: int
    node_rank: int
    nnodes: int
    run_dir: str
    work_dir: str
    out_dir: str
    log_path: str
    resume_from: str
    visible_devices: list[int]
    master_addr: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    files: dict[str, str]
    packages: list[str]
    python: str
    path: str
    unpacked: str


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _mapping(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def read(raw: bytes) -> Node | None:
    """The binding's node and plan, read as plain JSON; None without a plan or when anything is
    not as this reader expects (the full runner then reads it strictly)."""
    try:
        b = json.loads(raw)
        p = b["launch"]
        node = Node(
            run_id=str(b["run_id"]),
            attempt=int(b["attempt"]),
            node_rank=int(b.get("node_rank", 0)),
            nnodes=int(b.get("nnodes", 1)),
            run_dir=str(b["run_dir"]),
            work_dir=str(b["work_dir"]),
            out_dir=str(b["out_dir"]),
            log_path=str(b["log_path"]),
            resume_from=str(b.get("resume_from", "")),
            visible_devices=[int(i) for i in b.get("visible_devices", [])],
            master_addr=str(b.get("master_addr", "127.0.0.1")),
            argv=p["argv"],
            cwd=str(p["cwd"]),
            env=p.get("env", {}),
            files=p.get("files", {}),
            packages=p.get("packages", []),
            python=str(p.get("python", "")),
            path=str(p.get("path", "")),
            unpacked=str(p.get("unpacked", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None
    plain = _strings(node.argv) and _strings(node.packages)
    return node if node.argv and plain and _mapping(node.env) and _mapping(node.files) else None


def _holds(node: Node, environ: Mapping[str, str]) -> bool:
    """Whether the plan is this node's: this interpreter, this PATH, the package it names
    unpacked in the work dir."""
    if node.python != sys.executable or node.path != environ.get("PATH", ""):
        return False
    try:
        marker = json.loads((Path(node.work_dir) / UNPACKED_MARKER).read_text())
    except (OSError, ValueError):
        return False
    ours = isinstance(marker, dict) and marker.get("manifest") == node.unpacked
    return bool(node.unpacked) and ours


def job_env(node: Node, environ: Mapping[str, str]) -> dict[str, str]:
    """The job's environment: the plan's over the runner's, with this node's facts the server
    could not know (the GPUs and the master address Slurm allocated, as ``slurm.apply`` takes
    them; whether the GPUs are virtual)."""
    env = {**records.base_env(environ), **node.env}
    devices, master = node.visible_devices, node.master_addr
    if slurm.under_slurm(environ):
        devices = slurm.devices(environ.get("CUDA_VISIBLE_DEVICES", "")) or devices
        master = environ.get(slurm.MASTER_ADDR) or master
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in devices)
    env["MASTER_ADDR"] = master
    if devices and not container.host_gpus():
        env[container.VIRTUAL_GPUS_ENV] = "1"
    return env


class EarlyTerm:
    """SIGTERM before the full runner takes over: remembered, and passed to the job if it runs."""

    def __init__(self) -> None:
        self.received = False
        self.child: subprocess.Popen[bytes] | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.received = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)


@dataclass
class Started:
    """What the quick start hands the full runner: the binding, the open log, the job (None:
    it did not start, ``failed`` says why, or a SIGTERM came first)."""

    binding: bytes
    log: IO[bytes]
    early: EarlyTerm
    child: subprocess.Popen[bytes] | None = None
    failed: str = ""


def _launch(node: Node, started: Started) -> None:
    log = started.log
    log.write(records.log_line(f"the server unpacked the package into {node.work_dir}"))
    if node.packages:
        from starforge.runner.preflight import check_packages

        check_packages(node.packages)
    Path(node.out_dir).mkdir(parents=True, exist_ok=True)
    for path, content in node.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content)
    if started.early.received:
        return
    log.write(records.log_line(f"running: {' '.join(node.argv)} (cwd {node.cwd}; planned)"))
    try:
        started.child = started.early.child = subprocess.Popen(
            node.argv,
            cwd=node.cwd,
            env=job_env(node, os.environ),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    except OSError as exc:  # not executable
        started.failed = f"could not start {node.argv[0]}: {exc}"


def start(argv: list[str]) -> Started | None:
    """Start the job of ``python -m starforge.runner BINDING`` from the server's plan; None
    when this node has no plan that holds (nothing was started or written)."""
    if len(argv) != 1 or argv[0] == "stage":
        return None
    try:
        raw = Path(argv[0]).read_bytes()
    except OSError:
        return None
    node = read(raw)
    if node is None or not _holds(node, os.environ):
        return None
    records.write_runner_record(node)  # first: a server that missed the start adopts it
    Path(node.log_path).parent.mkdir(parents=True, exist_ok=True)
    started = Started(raw, open(node.log_path, "ab", buffering=0), EarlyTerm())  # noqa: SIM115
    signal.signal(signal.SIGTERM, started.early)
    started.log.write(
        records.log_line(
            f"run {node.run_id} attempt {node.attempt} node {node.node_rank}/{node.nnodes} starting"
        )
    )
    if node.resume_from:
        started.log.write(records.log_line(f"resuming from {node.resume_from}"))
    try:
        _launch(node, started)
    except (StarForgeError, OSError, ValueError) as exc:
        started.failed = exc.message if isinstance(exc, StarForgeError) else str(exc)
    return started

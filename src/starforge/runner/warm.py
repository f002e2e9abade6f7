"""``python -m starforge.runner.warm MODULE``: a warm runner, forking one runner per node start.

A fresh ``python -m starforge.runner`` spends most of its start importing (pydantic, httpx, the
catalog's adapters). The local executor instead keeps one warm process with those imports done
and asks it for each start: one JSON line on its stdin, ``{"binding", "log", "env"}``, answered
with one JSON line on its stdout, ``{"pid": N}`` or ``{"error": "..."}``, after a first line
``{"ready": true}`` once its imports are done. The child runs
``MODULE`` as ``python -m MODULE BINDING`` would (``runpy``, as ``__main__``): the runner's own
``starforge.runner`` in a server, another module where a test plays the runner.

Each start is a forked child that becomes exactly what a fresh runner would be: it leads a new
session (so its own process group, pgid = pid, which the executor signals and the runner records
for adoption), has /dev/null as stdin and the attempt's log as stdout and stderr, no other open
descriptors, the binding's folder as its cwd, the server's environment of the moment of the
start, default signal handlers, and exits with ``main``'s code after its non-daemon threads end
(an uncaught exception is printed to the log and exits 1, as the interpreter would). The answer
is sent only once the child leads its session, so a stop right after the start reaches it.

``python -m starforge.runner.warm --trainer MODULE`` is the warm trainer: it also imports the
training stack (:data:`TRAINER_PRELOAD`: torch, transformers, datasets, accelerate, trl) and
marks it imported (:mod:`starforge.runner.jobfork`), so the runners it forks can fork their
python jobs instead of starting a fresh interpreter. The local executor starts it, under the
environment its jobs will have, at the first start of a trl run.

The warm process ignores SIGCHLD, so the kernel reaps its children and none lingers as a zombie;
it has no Python threads (forking is safe; the warm trainer's pyarrow keeps a jemalloc thread,
which handles forks itself) and ends when its stdin closes (the server went away): the runners
it started live on, in their own sessions, as fresh ones would.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import signal
import sys
from pathlib import Path
from typing import Any

import starforge.runner.main  # noqa: F401
from starforge.catalog.loader import all_methods
from starforge.contract.env import WARM_TRAINER_FLAG, WARM_TRAINER_PRELOAD_ENV
from starforge.runner import fresh, jobfork

RUNNER_MODULE = "starforge.runner"
# What a runner imports on its way (some lazily: the HTTP stack, the framework adapters),
# imported once here so that no child pays for it; a name missing from this install is skipped.
PRELOAD = (
    "httpx",
    "httpcore._sync.connection_pool",
    "httpcore._backends.sync",
    "h11",
    "certifi",
    "encodings.idna",
    "starforge.client.http",
    "starforge.contract.observability",
    "starforge.runner.stage",  # with runner.datasets
    "starforge.runner.pull",
    "starforge.runner.preflight",
    "starforge.runner.spooldrain",
    "starforge.catalog.adapters.custom",
    "starforge.catalog.adapters.nemo_rl",
    "starforge.catalog.adapters.trl",
    "starforge.catalog.adapters.verl",
)
# What the trl templates and the export and eval steps import, attributes included: trl and
# transformers load their classes lazily, on first access.
TRAINER_PRELOAD = (
    "yaml",
    "torch",
    "numpy",
    "transformers:AutoModelForCausalLM,AutoTokenizer,LlamaConfig,PreTrainedTokenizerFast,"
    "PrinterCallback,TrainerCallback,TrainerState",
    "tokenizers",
    "datasets:load_dataset",
    "accelerate",
    "trl:SFTConfig,SFTTrainer,GRPOConfig,GRPOTrainer,DPOConfig,DPOTrainer",
)


def preload() -> None:
    """Import what runners need and read the catalog (cached: each child inherits it; a fresh
    runner would read the same files, which change only with the installed package)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    all_methods()


def serve(requests: Any, answers: Any, module: str = RUNNER_MODULE) -> None:
    """Say it is ready (its imports are done, it has read nothing yet), then answer one start
    per line of ``requests`` until it closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forked runners
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer: dict[str, Any] = {"pid": start(request, module)}
        except Exception as exc:  # the server falls back to a fresh runner
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def start(request: dict[str, Any], module: str) -> int:
    """Fork the runner of one node; its pid, once it leads its own session."""
    binding, log = str(request["binding"]), str(request["log"])
    env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(ready_r)
        _child(module, binding, log, env, ready_w)
    os.close(ready_w)
    try:
        led = os.read(ready_r, 1)  # empty when the child died before leading its session
    finally:
        os.close(ready_r)
    if not led:
        raise RuntimeError(f"the forked runner {pid} ended before it led its session")
    return pid


def _child(module: str, binding: str, log: str, env: dict[str, str], ready_w: int) -> None:
    code = 1
    try:
        os.setsid()
        os.write(ready_w, b"1")
        os.close(ready_w)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fresh.become(stdin=os.devnull, stdout=out, cwd=str(Path(binding).parent), env=env)
        sys.argv = [module, binding]  # runpy puts the module's file first, as ``-m`` does
        code = fresh.outcome(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
    finally:
        fresh.exit_like_python(code)


def preload_trainer(before: dict[str, str], names: tuple[str, ...] = TRAINER_PRELOAD) -> None:
    """Import the training stack (``module`` or ``module:attr,attr`` for lazy attributes), then
    record ``before``, the environment it was imported under (:func:`jobfork.mark_imported`).
    Not when an import initialised CUDA (:func:`cuda_touched`): a forked job could not use it."""
    for entry in names:
        name, _, attrs = entry.partition(":")
        try:
            module = importlib.import_module(name)
            for attr in filter(None, attrs.split(",")):
                getattr(module, attr)
        except Exception:  # not installed here, or broken: its jobs import it themselves
            continue
    if cuda_touched():
        return
    jobfork.mark_imported(before)
    gc.freeze()  # the imported objects stay out of the collector: fewer pages copied per fork


def cuda_touched() -> bool:
    """Whether this process initialised CUDA's driver: then no child of a fork may use CUDA.
    torch initialises it lazily, but ``torch.cuda.is_available()`` (which an import may call)
    already runs ``cuInit``, which loads libcuda and opens /dev/nvidiactl."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return True
    try:
        with open("/proc/self/maps") as maps:
            if any("/libcuda.so" in line for line in maps):
                return True
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return True  # unknown: as if it did
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                return True
    return False


def main(argv: list[str]) -> int:
    trainer = bool(argv) and argv[0] == WARM_TRAINER_FLAG
    args = argv[1:] if trainer else argv
    before = dict(os.environ)
    preload()
    gc.freeze()  # out of the collector's reach: a child's collections copy none of their pages
    if trainer:
        names = os.environ.get(WARM_TRAINER_PRELOAD_ENV)  # space-separated
        preload_trainer(before, tuple(names.split()) if names is not None else TRAINER_PRELOAD)
    serve(sys.stdin, sys.stdout, args[0] if args else RUNNER_MODULE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

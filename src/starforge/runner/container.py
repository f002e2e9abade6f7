"""One node of a run inside its image: the podman command line, and the container's fate.

The runner stays on the host and supervises ONE container per node. :func:`podman_argv` is a pure
function from what the runner decided (image, entrypoint, env, mounts, GPUs, limits) to the
``podman run`` argv, so its text is tested as a golden file; the rest reads back what happened
(exit code, OOM kill, a container that never started) and removes the container.

Guarantees:
- the container has the name ``sf-<run>-<attempt>-<rank>``, so a stop, a pause or a lost runner
  can find it; it is removed once its exit was read (``podman rm -f``);
- the run's work and out folders (and the Hugging Face cache) are mounted at the same absolute
  paths, so every path in the job's environment means the same inside and outside;
- the job's environment is passed with ``-e`` key by key: what the platform and the method set,
  never the host's own environment and never the runner's token;
- GPUs are CDI devices (``nvidia.com/gpu=N``), renumbered 0..n-1 inside, as CUDA sees them there;
- limits are the host's (podman's defaults ask for more than an unprivileged host may set);
- ``starforge.report`` is importable in any image: the package is mounted read-only on
  ``PYTHONPATH``.

Walls between runs (a root server, each attempt under a uid of its own: docs/containers.md):
- the job runs as the run's uid and member group (``--user uid:gid``), with no capability and no
  way to gain one (``--cap-drop all``, ``no-new-privileges``): a setuid-root program in the image
  stays the run's uid (without them it would be root on the host, as podman runs as root with no
  user namespace). No ``--userns``: the uid is already the run's alone, and a user namespace of
  its own per attempt would make podman copy the image's files for each new mapping;
- its own PID and IPC namespaces (pinned, whatever containers.conf says): no other run's process
  is visible to it, so none can be read (``/proc``) or signalled;
- the only host folders it sees are its run's ``work`` and ``out`` (its Hugging Face cache is
  inside) and, read-only, its datasets (the run's own views), the parent artifacts of
  ``--init-from``, the starforge package and the profile's mounts;
- the job's token is not on podman's command line (which every host user may read in ``ps``):
  ``-e STARFORGE_TOKEN`` names it, podman takes it from its own environment
  (:func:`podman_env`).
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import starforge
from starforge.contract.errors import RunnerError

if TYPE_CHECKING:  # a quick start (runner/quick.py) asks host_gpus before it imports pydantic
    from starforge.contract.env import Binding

RUNTIME = "runc"  # crun refuses a cgroup v1+v2 hybrid (docs/containers.md)
NPROC_CAP = 32768  # podman lowers its own nproc limit to this before it starts the container
REPORT_MOUNT = "/opt/starforge/python"  # where the starforge package is mounted inside
STOP_GRACE_S = 10
# A profile's env may cap a container's memory (podman --memory, e.g. "512m").
MEMORY_ENV = "STARFORGE_CONTAINER_MEMORY"
# ... and name host folders (comma-separated) mounted read-only at the same paths: a host Python
# install, a shared dataset.
MOUNTS_ENV = "STARFORGE_CONTAINER_MOUNTS"
# Values podman takes from its own environment, not its argv (readable by every host user).
HIDDEN_ENV = ("STARFORGE_TOKEN",)
# Where podman finds CDI specs (the NVIDIA Container Toolkit writes one per host).
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
# Set (1) for a job whose GPUs are the virtual inventory's: the host has none, it trains on the CPU.
VIRTUAL_GPUS_ENV = "FORGE_VIRTUAL_GPUS"


@dataclass(frozen=True)
class Mount:
    host: str
    inside: str
    read_only: bool = False

    def flag(self) -> str:
        return f"{self.host}:{self.inside}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class ContainerSpec:
    """Everything one ``podman run`` of a node needs; built by the runner, compiled purely."""

    name: str
    image: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    mounts: list[Mount] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    nofile: int = 1024
    nproc: int = NPROC_CAP
    user: str = ""  # "uid:gid"; "" = the image's user
    memory: str = ""  # podman --memory; "" = no limit


def container_name(run_id: str, attempt: int, rank: int) -> str:
    return f"sf-{run_id}-{attempt}-{rank}"


def host_limits() -> tuple[int, int]:
    """(nofile, nproc) a container may have: the runner's hard limits, nproc capped."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if nofile == resource.RLIM_INFINITY:
        nofile = 1048576
    if nproc == resource.RLIM_INFINITY or nproc > NPROC_CAP:
        nproc = NPROC_CAP
    return nofile, nproc


def podman_argv(c: ContainerSpec) -> list[str]:
    """The ``podman run`` command line of one node (pure: a golden test holds its text)."""
    argv = ["podman", "run", "--name", c.name, "--runtime", RUNTIME, "--init"]
    argv += ["--network", "host"]  # the job reaches the server on 127.0.0.1
    argv += ["--pid", "private", "--ipc", "private"]  # no other run's processes in sight
    argv += ["--ulimit", f"nofile={c.nofile}:{c.nofile}", "--ulimit", f"nproc={c.nproc}:{c.nproc}"]
    if c.memory:  # no swap beyond it: a job over its memory is killed, not slowed down
        argv += ["--memory", c.memory, "--memory-swap", c.memory]
    if c.user:  # the run's uid, which neither has nor can gain a capability
        argv += ["--user", c.user, "--cap-drop", "all", "--security-opt", "no-new-privileges"]
    for gpu in c.gpus:
        argv += ["--device", f"nvidia.com/gpu={gpu}"]
    for m in c.mounts:
        argv += ["-v", m.flag()]
    env = dict(c.env)
    if c.gpus:  # only the injected GPUs are visible inside, numbered from 0
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(c.gpus)))
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    for key in sorted(env):
        argv += ["-e", key if key in HIDDEN_ENV else f"{key}={env[key]}"]
    argv += ["--workdir", c.cwd, c.image, *c.argv]
    return argv


def podman_env(c: ContainerSpec) -> dict[str, str]:
    """What podman's own environment must hold for :func:`podman_argv`: the values of the
    :data:`HIDDEN_ENV` names it passes without their values."""
    return {key: c.env[key] for key in HIDDEN_ENV if key in c.env}


def host_gpus() -> bool:
    """Whether this host has NVIDIA GPUs to inject. A host without (the virtual inventory:
    jobs train on the CPU) injects none, as its jobs on the host see none."""
    return shutil.which("nvidia-smi") is not None


def cdi_names_gpus(dirs: tuple[Path, ...] = CDI_DIRS) -> bool:
    """Whether a CDI spec on this host names NVIDIA GPUs (what ``--device nvidia.com/gpu=N``
    resolves through)."""
    for folder in dirs:
        for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.json")):
            try:
                if "nvidia.com" in path.read_text(errors="replace"):
                    return True
            except OSError:
                continue
    return False


def check_devices(b: Binding, dirs: tuple[Path, ...] = CDI_DIRS) -> str:
    """Before the container starts: a node with GPUs on a host that has real ones needs their
    CDI spec (else podman fails with ``unresolvable CDI devices``): a startup failure naming the
    fix. Returns a line for the log when the run's GPUs are virtual (a host without any)."""
    if not b.visible_devices:
        return ""
    if not host_gpus():
        return (
            f"this host has no NVIDIA GPU: the node's GPUs {b.visible_devices} are the virtual "
            f"inventory's, none is given to the container, and the job is told so "
            f"({VIRTUAL_GPUS_ENV}=1)"
        )
    if not cdi_names_gpus(dirs):
        raise RunnerError(
            "this host has NVIDIA GPUs but no CDI spec names them, so podman cannot give the "
            f"container its GPUs (looked in {', '.join(str(d) for d in dirs)})",
            hint="as root, generate the spec with the NVIDIA Container Toolkit: "
            "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml, then retry the run",
        )
    return ""


def report_mount() -> Mount:
    """The starforge package, read-only, where ``PYTHONPATH`` finds it inside."""
    package = Path(starforge.__file__).resolve().parent
    return Mount(str(package), f"{REPORT_MOUNT}/starforge", read_only=True)


def with_report_path(env: dict[str, str]) -> dict[str, str]:
    current = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": f"{REPORT_MOUNT}:{current}" if current else REPORT_MOUNT}


@dataclass(frozen=True)
class Fate:
    """What became of a container: its exit code, and why when it is not the job's own."""

    code: int
    oom_killed: bool = False
    start_error: str = ""  # the runtime could not start the entrypoint (missing shell, ...)


def _podman(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


# What catatonit (--init) prints when the entrypoint is not in the image; exit code 1 alone
# could be the job's own.
_EXEC_FAILED = "failed to exec pid1"


def fate(name: str, code: int, log_tail: str, *, capped: bool, stopped: bool) -> Fate:
    """Read the container's state once it exited (it is still there: no ``--rm``).

    Podman 4.3 on a cgroup v1/v2 hybrid never sets ``OOMKilled`` (measured), so a SIGKILL
    (137) that nobody asked for, in a container with a memory cap, counts as the OOM killer's
    too: on the host nothing else kills a job's processes unasked."""
    out = _podman("inspect", "--format", "{{.State.OOMKilled}}|{{.State.Error}}", name)
    oom, _, error = out.stdout.strip().partition("|") if out.returncode == 0 else ("", "", "")
    error = error.strip()
    oom_killed = oom == "true" or (code == 128 + 9 and capped and not stopped)
    if not error and code == 1:
        for line in reversed(log_tail.splitlines()):
            if _EXEC_FAILED in line:
                error = line.strip()
                break
    return Fate(code, oom_killed=oom_killed, start_error=error)


def stop(name: str, grace_s: int = STOP_GRACE_S) -> None:
    """TERM, then KILL after ``grace_s`` (podman does both); a gone container is fine."""
    _podman("stop", "-t", str(grace_s), name, timeout=grace_s + 30.0)


def remove(name: str) -> None:
    _podman("rm", "-f", "--time", "0", name)


def container_env(plan_env: dict[str, str], host_env: dict[str, str]) -> dict[str, str]:
    """What the platform, the method and the job's user set: the host's own environment (its
    PATH, its virtualenv) stays on the host, the image brings its own."""
    return {k: v for k, v in plan_env.items() if host_env.get(k) != v}


def parent_artifact_mounts(b: Binding, env: dict[str, str]) -> list[Mount]:
    """``--init-from``: the parent run's checkpoint or export (``FORGE_MODEL``, a folder of
    another run under the storage root), read-only at the same path; nothing for a hub id or
    a model in this run's own folders."""
    model = env.get("FORGE_MODEL", "")
    runs = b.storage_root.rstrip("/") + "/runs/"
    own = (b.work_dir.rstrip("/") + "/", b.out_dir.rstrip("/") + "/")
    if not model.startswith(runs) or model.startswith(own) or ".." in model.split("/"):
        return []
    return [Mount(model, model, read_only=True)]


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def spec_for(
    b: Binding,
    *,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    host_env: dict[str, str],
    user: str = "",
) -> ContainerSpec:
    """The container of one node, from its binding and its compiled launch plan."""
    mounts = [Mount(b.work_dir, b.work_dir), Mount(b.out_dir, b.out_dir)]
    hf_home = env.get("HF_HOME", "")
    if hf_home and not _inside(hf_home, [b.work_dir, b.out_dir]):
        # A cache shared by runs (a run of its own uid has its own, in its out folder: mounted
        # already, and the job's to create).
        Path(hf_home).mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(hf_home, hf_home))
    mounts.append(report_mount())
    extra = [p.strip() for p in b.extra_env.get(MOUNTS_ENV, "").split(",") if p.strip()]
    mounts += [Mount(p, p, read_only=True) for p in extra]
    mounts += parent_artifact_mounts(b, env)
    nofile, nproc = host_limits()
    return ContainerSpec(
        name=container_name(b.run_id, b.attempt, b.node_rank),
        image=b.image,
        argv=argv,
        cwd=cwd,
        env=with_report_path(container_env(env, host_env)),
        mounts=mounts,
        gpus=list(b.visible_devices) if host_gpus() else [],
        nofile=nofile,
        nproc=nproc,
        user=user,
        memory=b.extra_env.get(MEMORY_ENV, ""),
    )


def watchdog(runner_pid: int, name: str) -> None:
    """Remove the container when the runner is gone, however it went (a SIGKILL to its group
    too): a process in its own session, outside the group the executor signals."""
    # A zombie runner counts as gone (kill -0 still finds it where nobody reaps it).
    script = (
        f"while [ -e /proc/{runner_pid} ] && [ \"$(cut -d' ' -f3 /proc/{runner_pid}/stat)\" != Z ];"
        f" do sleep 1; done; exec podman rm -f --time 0 {name} >/dev/null 2>&1"
    )
    subprocess.Popen(
        ["sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

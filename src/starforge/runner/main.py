"""One node of one attempt: report, unpack, build the environment, run the entrypoint, report.

When the binding names a job user (a root server's jobs run as ``nobody`` by default), the runner
stays root and starts the entrypoint as that user, with only the run's ``work`` and ``out``
handed to it (:mod:`starforge.runner.jobuser`).

The entrypoint's stdout and stderr go straight into the attempt's log file (a plain file on the
shared storage, so logs survive anything that happens to the server). The child shares the
runner's process group, so the executor's SIGTERM to the group reaches the training itself, which
checkpoints and exits; the runner outlives it to report the exit code.

Reports and heartbeats go through :class:`~starforge.runner.report.Reporter` in the background:
once started, the training goes on and ends whether or not the server answers. Before it starts,
the runner checks once that the server answers (:meth:`Runner._reach_server`): a training that
could never report would end unseen (no ``running``, no metrics), so an attempt whose runner
cannot reach its server fails at its start, naming the URL and the error (a certificate refused:
the server's ``tls_ca_file``), in its exit record (a quick start, :mod:`starforge.runner.quick`,
checks right after its job started, and terminates the job). When the server says the
attempt is over (it was finalised without this runner, or a newer attempt took over), the runner
terminates its training (SIGTERM, SIGKILL after ``FENCE_GRACE_S``) so no attempt runs twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from starforge.catalog.adapters import CompileContext, LaunchPlan, compile_plan
from starforge.catalog.adapters.base import run_config
from starforge.catalog.loader import get_method
from starforge.contract.datasets import OUTPUT_SUBDIR, RESOLVED_KEY, resolved_of
from starforge.contract.env import Binding, job_env
from starforge.contract.errors import (
    RunnerError,
    ServerUnreachable,
    StarForgeError,
    UntrustedCertificate,
)
from starforge.contract.jobspec import InputRef, JobSpec, Manifest
from starforge.contract.layout import RunLayout
from starforge.contract.packs import read_extents
from starforge.contract.states import EndReason
from starforge.runner import container, jobfork, jobuser, quick, ranks, records, slurm, uids, unpack
from starforge.runner import secrets as job_secrets
from starforge.runner.report import Reporter, client_for, write_exit_record, write_runner_record

# What a plain job on the host never needs before it starts is imported where it is used (a cold
# runner under srun pays for each import before its job's first line): the dataset cache and the
# staged inputs, the image's pull (with its registry client), the runtime's package check, and
# the report spool's drain (after the job). The warm runner imports them once (runner/warm.py).

SIGTERM_EXIT = 128 + signal.SIGTERM
FENCE_GRACE_S = 30.0
# How many heartbeat intervals a starting runner waits for a server that does not answer (one
# restarting moves to another port: the reporter follows its beacon meanwhile).
REACH_BEATS = 3
QUICK_EXIT_S = 0.02  # what a job's `running` report waits for, in case its exit comes with it


class Runner:
    def __init__(self, binding: Binding, log: IO[bytes]) -> None:
        self.binding = binding
        self.log = log
        self.reporter = Reporter(binding, self.say, on_fenced=self.on_fenced)
        self.child: subprocess.Popen[bytes] | jobfork.ForkedJob | None = None
        self.standby: jobfork.Standby | None = None  # see _start_child
        self.container = ""  # the container's name while the job runs inside its image
        self._program = ""  # what the container starts first (its absence: a startup failure)
        self.terminating = False
        self._say_lock = threading.Lock()
        self.masker: job_secrets.Masker | None = None  # set when the job has secrets to hide
        self._secret_env: set[str] = set()  # names of the secrets passed as variables
        self.dataset_env: dict[str, str] = {}  # <NAME>_DATA_DIR of the run's datasets
        self.launcher = ""  # the plan's distributed launcher ("torchrun"), see runner/ranks.py
        self.job_user: jobuser.JobUser | None = None  # who the job runs as, when not the runner
        self.own_uid = False  # the job runs under a uid of its own (the binding's job_uids)
        self._ranks: ranks.TermForwarder | None = None
        self.unreachable = False  # the server did not answer at the start (see _reach_server)

    def say(self, message: str) -> None:
        with self._say_lock:  # the reporter thread speaks too
            self.log.write(records.log_line(message))
            self.log.flush()

    def on_sigterm(self, signum: int, frame: object) -> None:
        self.terminating = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            if self.launcher == ranks.TORCHRUN and self._ranks is None:
                self._ranks = (
                    ranks.ContainerTermForwarder(self.container)
                    if self.container
                    else ranks.TermForwarder(self.child.pid)
                )
                self._ranks.start()

    def on_fenced(self, why: str) -> None:
        """The control plane ended this attempt: stop training, force it after a grace."""
        if self.container:  # podman stop: TERM, then KILL after the grace
            name = self.container
            threading.Thread(
                target=container.stop, args=(name, int(FENCE_GRACE_S)), daemon=True
            ).start()
        self.on_sigterm(signal.SIGTERM, None)
        child = self.child
        if child is not None:
            timer = threading.Timer(FENCE_GRACE_S, lambda: child.poll() is None and child.kill())
            timer.daemon = True
            timer.start()

    def _load(self) -> tuple[JobSpec, Manifest]:
        data = json.loads(RunLayout(Path(self.binding.run_dir)).run_json.read_text())
        # Admission composed the config once; a run.json without one (an older server) is
        # composed here from the package. Read leniently: run.json may come from a newer server.
        self.config: dict[str, Any] | None = data.get("config")
        self.packs = read_extents(data.get("packs"))  # where packed blobs lie (no database here)
        return JobSpec.read(data["spec"]), Manifest.read(data["manifest"])

    def _prepare_work_dir(self, manifest: Manifest) -> None:
        unpack.prepare_work_dir(self.binding, manifest, self.packs, self.say)

    def _fetch_datasets(self, spec: JobSpec) -> JobSpec:
        """Pull the run's datasets into the node's cache; the inputs then point into it."""
        resolved = resolved_of(self.config)
        if self.config is not None:
            self.config.pop(RESOLVED_KEY, None)  # the platform's record, not a trainer argument
        if spec.output_dataset:  # what the server publishes as that version once the run succeeds
            out = Path(self.binding.out_dir) / OUTPUT_SUBDIR
            out.mkdir(parents=True, exist_ok=True)
            self.dataset_env = {**self.dataset_env, "FORGE_DATASET_OUT_DIR": str(out)}
        if not resolved:
            return spec
        from starforge.runner import datasets, stage

        if self.binding.staged:  # the server linked them into the run (runner/stage.py)
            refs, found, said = stage.read(RunLayout(Path(self.binding.run_dir)))
        else:
            inputs = {key: getattr(spec.inputs, key) for key in resolved}
            refs, found, said = datasets.prepare(
                Path(self.binding.storage_root), resolved, inputs, self.packs
            )
            refs, found = self._dataset_views(refs, found)
        self.dataset_env = {**self.dataset_env, **found}
        for line in said:
            self.say(line)
        # Inside an image, the cached versions are mounted read-only at the same paths.
        given = self.binding.extra_env.get(container.MOUNTS_ENV, "")
        mounts = [m for m in given.split(",") if m.strip()] + list(found.values())
        self.binding.extra_env[container.MOUNTS_ENV] = ",".join(mounts)
        return spec.model_copy(update={"inputs": spec.inputs.model_copy(update=refs)})

    def _dataset_views(
        self, refs: dict[str, InputRef], found: dict[str, str]
    ) -> tuple[dict[str, InputRef], dict[str, str]]:
        """For a job of a uid of its own: its datasets through views of its own (the cache is
        root's alone, :func:`datasets.private_views`)."""
        from starforge.runner import datasets

        b = self.binding
        if b.job_user or not b.job_uids or os.geteuid() != 0:
            return refs, found
        views = datasets.private_views(
            Path(b.storage_root), Path(b.run_dir), b.job_gid, [Path(v) for v in found.values()]
        )
        return datasets.through_views(views, refs, found)

    def _compile(self, spec: JobSpec) -> LaunchPlan:
        """Preflight the runtime, compile the method's launch plan, write the files it needs."""
        b = self.binding
        method = get_method(spec.method.id)
        if spec.method.framework_version:
            from starforge.runner.preflight import check_packages

            _, runtime = method.runtime_version(spec.method.framework_version)
            check_packages(runtime.packages)
        work = Path(b.work_dir)

        def read(rel: str) -> str | None:
            path = work / rel
            return path.read_text() if path.is_file() else None

        Path(b.out_dir).mkdir(parents=True, exist_ok=True)
        if b.tls_ca:  # the job's SDK trusts the server by it (STARFORGE_CA_FILE, job_env)
            ca = RunLayout(Path(b.run_dir)).ca_file
            ca.parent.mkdir(parents=True, exist_ok=True)
            ca.write_text(b.tls_ca, encoding="ascii")
            ca.chmod(0o644)
        env = {**self._base_env(), **job_env(spec, b), **self.dataset_env}
        plan = compile_plan(
            CompileContext(
                spec=spec,
                method=method,
                binding=b,
                env=env,
                config=self.config if self.config is not None else run_config(spec, method, read),
            )
        )
        for path, content in plan.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(content)
        return plan

    def _hand_over(self, plan: LaunchPlan) -> dict[str, Any]:
        """Prepare the job's user (the binding's ``job_user``, or a uid of its own from
        ``job_uids``): its folders, its HOME; return what Popen needs to start the job as that
        user (nothing when it is the runner's)."""
        b = self.binding
        user = self._job_identity()
        if user is None:
            if b.job_user and slurm.under_slurm(os.environ):
                self._as_submitted(plan)
            return {}
        self.job_user = user
        jobuser.check_reachable(user, Path(b.run_dir))
        out = Path(b.out_dir)
        home = out / ".starforge" / "home"
        home.mkdir(parents=True, exist_ok=True)
        shared = [Path(plan.env["HF_HOME"])] if plan.env.get("HF_HOME") else []
        if self.own_uid:
            if not (b.image and b.containers == "podman"):  # in an image: the image's program
                jobuser.check_runnable(user, plan.argv[0], plan.env.get("PATH", ""))
            # The Hugging Face cache is the run's own: nothing one run writes is read by another.
            plan.env["HF_HOME"] = str(out / ".starforge" / "hf")
            shared = []
        jobuser.hand_over(
            user,
            run_dir=Path(b.run_dir),
            writable=[Path(b.work_dir), out],
            shared=shared,
            walled=self.own_uid,
        )
        plan.env.update(user.env(str(home)))
        self.say(f"the job runs as {user.name} (uid {user.uid}, gid {user.gid})")
        return user.popen_kwargs()

    def _as_submitted(self, plan: LaunchPlan) -> None:
        """A job Slurm runs as its member's account (the runner is that account): its own HOME
        and names (not the submitting root's), and a Hugging Face cache of its run's own."""
        user = jobuser.submitted_as()
        plan.env["HF_HOME"] = str(Path(self.binding.out_dir) / ".starforge" / "hf")
        plan.env.update(user.env(os.path.expanduser(f"~{user.name}")))
        self.say(f"the job runs as {user.name} (uid {user.uid}, gid {user.gid}), its account")

    def _job_identity(self) -> jobuser.JobUser | None:
        b = self.binding
        if b.job_user or not b.job_uids or os.geteuid() != 0:
            return jobuser.resolve(b.job_user)
        first, last = b.job_uids[0], b.job_uids[-1]
        record = {"run_dir": b.run_dir, "gid": b.job_gid}
        uid = uids.take(Path(b.storage_root), first, last, b.run_id, b.attempt, record)
        self.own_uid = True
        return jobuser.dynamic(uid, b.job_gid or uid)

    def _take_back(self) -> None:
        b = self.binding
        user = self.job_user if self.own_uid else None
        # The last node of the attempt with no process left under the uid gives it back and takes
        # the folders back; any other leaves them to that one (or to the uid's next taker).
        if user is not None and not uids.give_back(
            Path(b.storage_root), user.uid, b.run_id, b.attempt
        ):
            return
        try:
            gid = user.gid if user is not None else None
            jobuser.take_back([Path(b.work_dir), Path(b.out_dir)], gid)
        except OSError as exc:  # the run's result stands; only the ownership stays the job's
            self.say(f"could not take the run's folders back from the job's user: {exc}")

    def _reach_server(self) -> None:
        """Raise RunnerError unless the control plane answers: at once for a certificate this
        runner does not trust (no wait changes that), else after ``REACH_BEATS`` heartbeats."""
        if not self.reporter.enabled:
            return
        deadline = time.monotonic() + REACH_BEATS * self.reporter.heartbeat_s
        while True:
            url = self.reporter.url  # the reporter's thread follows the beacon
            try:
                with client_for(self.binding, url, timeout=5.0) as client:
                    client.health()
                return
            except UntrustedCertificate as exc:  # before ServerUnreachable: its subclass
                self.unreachable = True
                raise RunnerError(f"the control plane cannot be reached: {exc.message}") from None
            except ServerUnreachable as exc:
                if time.monotonic() >= deadline:
                    self.unreachable = True
                    raise RunnerError(
                        f"the control plane cannot be reached: {exc.message} (for "
                        f"{REACH_BEATS * self.reporter.heartbeat_s:.0f} s; check the server's "
                        "url setting: runners must reach it)"
                    ) from None
            except StarForgeError:
                return  # it answered, if with an error: the reports will say more
            time.sleep(0.5)

    def _base_env(self) -> dict[str, str]:
        # The runner inherits the control plane's environment; its settings are not the job's.
        return records.base_env(os.environ)

    def run(self) -> int:
        b = self.binding
        self.say(f"run {b.run_id} attempt {b.attempt} node {b.node_rank}/{b.nnodes} starting")
        if b.resume_from:
            self.say(f"resuming from {b.resume_from}")
        # Before the reporter's thread: a fork must be made while this process has one thread.
        self.standby = jobfork.Standby.fork()
        self.reporter.start()
        self.reporter.send("starting", at_once=False)  # a quick start sends it with "running"
        try:
            self._reach_server()
            spec, manifest = self._load()
            self._prepare_work_dir(manifest)
            spec = self._fetch_datasets(spec)
            plan = self._compile(spec)
            self._check_devices(plan)
            self.launcher = plan.launcher
            as_user = self._hand_over(plan)
            self._take_secrets(spec, plan)
            self._pull_image()
        except (StarForgeError, OSError, ValueError) as exc:
            message = exc.message if isinstance(exc, StarForgeError) else str(exc)
            self.say(f"startup failed: {message}")
            return self._finish(2, EndReason.STARTUP_FAILED, message)
        if self.terminating:
            self.say("terminated before the entrypoint started")
            return self._finish(SIGTERM_EXIT, None)
        argv, cwd, env, popen_user = self._launch_command(plan, as_user)
        if self.container and self._secret_env:  # values in podman's env, not its argv
            argv, moved = job_secrets.hide_in_argv(argv, self._secret_env)
            env = {**env, **moved}
        self.say(f"running: {' '.join(plan.argv)} (cwd {plan.cwd})")
        self.reporter.send("running", at_once=False)  # see _wait: a quick job's exit joins it
        try:
            self.child = self._start_child(argv, cwd, env, popen_user)
        except OSError as exc:  # not executable, or not by the job's user
            self.say(f"startup failed: could not start {argv[0]}: {exc}")
            if as_user:
                self._take_back()
            return self._finish(2, EndReason.STARTUP_FAILED)
        return self._supervise(self.child, as_user)

    def not_started(self, why: str) -> int:
        """The quick start's end when its job did not start (``why``: its startup failure)."""
        self.reporter.start()
        self.reporter.send("starting", at_once=False)
        if why:
            self.say(f"startup failed: {why}")
            return self._finish(2, EndReason.STARTUP_FAILED, why)
        self.say("terminated before the entrypoint started")
        return self._finish(SIGTERM_EXIT, None)

    def run_started(self, child: subprocess.Popen[bytes]) -> int:
        """The quick start's rest (runner/quick.py): the job runs already; report it, check
        that the server answers (else terminate the job: the attempt fails at its start), wait
        for it and report its exit."""
        self.child = child
        self.reporter.start()
        self.reporter.send("starting", at_once=False)
        try:
            self._reach_server()
        except RunnerError as exc:
            self.say(f"startup failed: {exc.message}")
            self.on_sigterm(signal.SIGTERM, None)
            try:
                child.wait(timeout=FENCE_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            return self._finish(2, EndReason.STARTUP_FAILED, exc.message)
        self.reporter.send("running", at_once=False)
        return self._supervise(child, {})

    def _supervise(
        self, child: subprocess.Popen[bytes] | jobfork.ForkedJob, as_user: dict[str, Any]
    ) -> int:
        """From the job's start to the node's end: wait, take its exit code, report it."""
        pumping = None
        if self.masker is not None and child.stdout is not None:
            pumping = job_secrets.pump(child.stdout, self.log, self.masker)
        if self.container:
            container.watchdog(os.getpid(), self.container)
        if self.terminating:  # SIGTERM landed between the check and Popen
            self.on_sigterm(signal.SIGTERM, None)
        code = self._wait(child)
        if self._ranks is not None:
            self._ranks.stop()
        if pumping is not None:  # the job's last words are in the log before anything reads it
            pumping.join(timeout=10.0)
        if code < 0:
            code = 128 - code
        code = ranks.exit_code(code, launcher=self.launcher, terminating=self.terminating)
        reason = self._container_end(code) if self.container else None
        if as_user:
            self._take_back()
        if reason is None:
            reason = EndReason.COMPLETED if code == 0 else EndReason.EXIT_NONZERO
        return self._finish(code, reason)

    def _start_child(
        self, argv: list[str], cwd: str, env: dict[str, str], popen_user: dict[str, Any]
    ) -> subprocess.Popen[bytes] | jobfork.ForkedJob:
        """The job: the standby forked from the warm trainer turned into it when it can be (a
        python job on the host, as the runner's user), else a fresh process."""
        standby, self.standby = self.standby, None
        if standby is not None:
            if self.container or popen_user:
                standby.cancel()
            else:
                log_fd = None if self.masker else self.log.fileno()
                per_run = set(self.dataset_env)
                job = standby.launch(argv, cwd, env, log_fd=log_fd, per_run=per_run)
                if isinstance(job, jobfork.ForkedJob):
                    self.say("the job's interpreter was forked with its libraries imported")
                    return job
                self.say(f"the job starts in a fresh interpreter: {job}")
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.masker else self.log,
            stderr=subprocess.STDOUT,
            **popen_user,
        )

    def _wait(self, child: subprocess.Popen[bytes] | jobfork.ForkedJob) -> int:
        """The job's exit code. ``running`` goes out once the job has run ``QUICK_EXIT_S``: a
        job that ends sooner reports it with its exit, in one request instead of two."""
        try:
            return child.wait(timeout=QUICK_EXIT_S)
        except subprocess.TimeoutExpired:
            self.reporter.deliver()
        return child.wait()

    def _check_devices(self, plan: LaunchPlan) -> None:
        """Tell a job whose GPUs are virtual (a host without any) so; refuse a container on a host
        whose real GPUs podman cannot give it (no CDI spec), naming the fix."""
        b = self.binding
        if b.visible_devices and not container.host_gpus():
            plan.env[container.VIRTUAL_GPUS_ENV] = "1"
        if b.image and b.containers == "podman":
            said = container.check_devices(b)
            if said:
                self.say(said)

    def _launch_command(
        self, plan: LaunchPlan, as_user: dict[str, Any]
    ) -> tuple[list[str], str, dict[str, str], dict[str, Any]]:
        """(argv, cwd, env, Popen's user arguments) of the job: the plan itself on the host, or
        ``podman run`` of it when the run has an image and the server a container runtime."""
        b = self.binding
        if not b.image:
            return plan.argv, plan.cwd, plan.env, as_user
        if b.containers != "podman":
            self.say(
                f"the image {b.image} is not used: this server has no container runtime "
                "(containers: none), so the job runs on the host"
            )
            return plan.argv, plan.cwd, plan.env, as_user
        user = f"{as_user['user']}:{as_user['group']}" if as_user else ""
        spec = container.spec_for(
            b, argv=plan.argv, cwd=plan.cwd, env=plan.env, host_env=self._base_env(), user=user
        )
        self.container, self._program = spec.name, plan.argv[0]
        container.remove(spec.name)  # a container left by an earlier runner of this attempt
        self.say(f"inside the image {b.image} (podman, container {spec.name})")
        # podman itself runs as the runner (root); the job's user is podman's --user. The job's
        # token reaches podman through its environment, never its argv (see container.py).
        env = {**self._base_env(), **container.podman_env(spec)}
        return container.podman_argv(spec), plan.cwd, env, {}

    def _pull_image(self) -> None:
        """The run's image, pulled with its registry's login before its container starts
        (runner/pull.py); nothing without an image, a container runtime or a server to ask."""
        b = self.binding
        if not (b.image and b.containers == "podman" and self.reporter.url):
            return
        from starforge.runner import pull

        try:
            pull.pull(b, self.reporter.url, self.say)
        except RunnerError:
            if not self.terminating:  # a stop that cut the pull short is the stop's end
                raise

    def _container_end(self, code: int) -> EndReason | None:
        """Why the container ended, when it was not the job's own exit; removes it."""
        with open(self.binding.log_path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
            tail = log.read().decode(errors="replace")
        capped = bool(self.binding.extra_env.get(container.MEMORY_ENV))
        fate = container.fate(self.container, code, tail, capped=capped, stopped=self.terminating)
        container.remove(self.container)
        if fate.oom_killed:
            self.say("the container was killed for memory (OOM)")
            return EndReason.OOM
        if fate.start_error:
            self.say(
                f"startup failed: the image {self.binding.image} could not start the job's "
                f"program {self._program!r} ({fate.start_error}); use an image that has it"
            )
            return EndReason.STARTUP_FAILED
        return None

    def _take_secrets(self, spec: JobSpec, plan: LaunchPlan) -> None:
        """Fetch the values of the secrets the run asked for, hand them to the job (its env, or
        files only its user reads), and mask them in the log from now on."""
        names = job_secrets.requested(spec.secrets, self.config)
        if not names:
            return
        values = job_secrets.fetch(self.binding, self.reporter.url)
        owner = self.job_user
        job_secrets.deliver(values, plan.env, self.binding, owner)
        self.masker = job_secrets.Masker([v.value for v in values])
        self._secret_env = {v.name for v in values if v.mount == "env"}
        given = sorted(v.name for v in values)
        self.say(f"secrets for the job: {', '.join(given) or 'none'} (masked in this log)")
        gone = sorted(set(names) - set(given))
        if gone:
            self.say(f"secrets removed since admission, not given: {', '.join(gone)}")

    def _finish(self, code: int, reason: EndReason | None, why: str = "") -> int:
        if self.own_uid and self.job_user is not None and self.child is None:
            b = self.binding  # the job never started: its uid goes back at once
            uids.give_back(Path(b.storage_root), self.job_user.uid, b.run_id, b.attempt)
        if self.standby is not None:  # the run ended before its job started
            self.standby.cancel()
            self.standby = None
        if self.masker is not None:
            job_secrets.remove_files(self.binding)
        if self.terminating and code != 0 and slurm.under_slurm(os.environ):
            reason = slurm.why_terminated(os.environ) or reason  # node down, preempted
        from starforge.runner import spooldrain

        # The curves the job could not deliver go before its exit: a run that ended takes none.
        spooldrain.drain(self.binding, self.say)
        self.say(
            f"attempt {self.binding.attempt} node {self.binding.node_rank} exited with code {code}"
        )
        write_exit_record(self.binding, code, reason, why)
        self.reporter.send("exited", exit_code=code, end_reason=reason, message=why)
        # A server that never answered is not waited for: the exit record tells it.
        self.reporter.close(patience_s=1.0 if self.unreachable else 60.0)
        return code


def carry_on(started: quick.Started) -> int:
    """The rest of a quick start (runner/quick.py): the binding read strictly, then the runner."""
    binding = slurm.apply(Binding.read(started.binding), os.environ)
    with started.log:
        runner = Runner(binding, started.log)
        runner.terminating = started.early.received
        signal.signal(signal.SIGTERM, runner.on_sigterm)
        if started.child is None:
            return runner.not_started(started.failed)
        return runner.run_started(started.child)


def main(argv: list[str]) -> int:
    if argv[:1] == ["stage"]:
        from starforge.runner import stage

        return stage.main(argv[1:])
    if len(argv) != 1:
        print("usage: python -m starforge.runner BINDING_JSON", file=sys.stderr)
        return 2
    binding = Binding.read(Path(argv[0]).read_bytes())  # lenient: the server may be newer
    binding = slurm.apply(binding, os.environ)  # under Slurm: the GPUs and master it allocated
    write_runner_record(binding)  # first: a server that never recorded this start adopts it
    Path(binding.log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(binding.log_path, "ab", buffering=0) as log:
        runner = Runner(binding, log)
        signal.signal(signal.SIGTERM, runner.on_sigterm)
        return runner.run()

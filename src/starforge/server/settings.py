"""Server settings: one optional YAML file (``$STARFORGE_HOME/server.yaml``) plus ``STARFORGE_*``
environment variables, read with pydantic-settings.

Precedence, highest first: values passed in code (``--home``), environment variables, the YAML
file, the defaults below. Paths that depend on ``home`` (storage root, database URL) are derived
after loading, so moving ``home`` moves everything that was not set explicitly.

The inventory (which nodes and GPUs the local executor may hand out) is either declared or
detected: ``nvidia-smi`` where it lists GPUs (one node), else a virtual cluster so a laptop or CI
exercises the resource model with jobs running on the CPU.

Quotas: ``quota_defaults`` are the limits of every user an admin gave no quota of their own
(``sf admin quota set``); by default nobody is limited and every profile is allowed.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from starforge.contract import versions
from starforge.contract.api import MIN_CLIENT_VERSION, Quota
from starforge.contract.jobspec import MAX_FILE_BYTES
from starforge.contract.profiles import ProfileDef
from starforge.server import containers

# The YAML file's location depends on ``home``, which itself may come from the caller or the
# environment; load_settings() sets this before pydantic-settings collects its sources.

_YAML_FILE: ContextVar[Path | None] = ContextVar("starforge_server_yaml", default=None)


class NodeDef(BaseModel):
    """One node of the inventory: its GPUs are numbered 0 .. gpus-1."""

    model_config = ConfigDict(extra="forbid")

    name: str
    series: str
    gpus: int = Field(ge=0)


class QuotaDefaults(Quota):
    """``quota_defaults`` in server.yaml: a typo is an error, not a silently ignored key."""

    model_config = ConfigDict(extra="forbid")


class SlurmTarget(BaseModel):
    """Where a GPU series lives on Slurm: its partition and its GRES type (``gpu:<type>:<n>``)."""

    model_config = ConfigDict(extra="forbid")

    partition: str
    gres_type: str


class SlurmSettings(BaseModel):
    """``slurm:`` in server.yaml, read only when ``executor: slurm``."""

    model_config = ConfigDict(extra="forbid")

    # GPU series -> partition and GRES type; a series not listed maps to both of its own name.
    partitions: dict[str, SlurmTarget] = Field(default_factory=dict)
    pyxis: bool = False  # the cluster has Pyxis/enroot: runs with an image use srun --container-*
    signal_before_s: int = Field(default=120, ge=0)  # TERM this long before the time limit
    time_limit: str = ""  # sbatch --time (empty: the partition's default)
    sbatch_args: list[str] = Field(default_factory=list)  # e.g. ["--account=lab", "--qos=normal"]
    query_cache_s: float = Field(default=1.0, ge=0)  # one squeue per reconcile pass, not per node

    def target(self, series: str) -> SlurmTarget:
        return self.partitions.get(series) or SlurmTarget(partition=series, gres_type=series)


def default_profiles() -> list[ProfileDef]:
    return [
        ProfileDef(name="h200", series="h200", gpus_per_node=8, nodes=1),
        ProfileDef(name="h100", series="h100", gpus_per_node=8, nodes=1),
    ]


def virtual_inventory() -> list[NodeDef]:
    return [
        NodeDef(name="h200-1", series="h200", gpus=8),
        NodeDef(name="h200-2", series="h200", gpus=8),
        NodeDef(name="h100-1", series="h100", gpus=8),
    ]


def series_of(gpu_name: str) -> str:
    """``NVIDIA H200`` -> ``h200``; names without a model token become a slug of the whole name."""
    words = [w for w in re.split(r"[^a-z0-9]+", gpu_name.lower()) if w and w != "nvidia"]
    for word in words:
        if re.fullmatch(r"[a-z]+\d+[a-z]*", word):
            return word
    return "-".join(words) or "gpu"


def detect_inventory() -> list[NodeDef]:
    """One node of the GPUs ``nvidia-smi`` lists, or the virtual cluster when there are none."""
    names = gpu_names()
    if not names:
        return virtual_inventory()
    host = os.uname().nodename or "local"
    return [NodeDef(name=host, series=series_of(names[0]), gpus=len(names))]


def gpu_names() -> list[str]:
    """The GPUs ``nvidia-smi`` lists on this host; none without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _check_min_client(value: str) -> str:
    if versions.parse(value) is None:
        raise ValueError(f"{value!r} is not a version (e.g. {MIN_CLIENT_VERSION})")
    if versions.older(value, MIN_CLIENT_VERSION):
        raise ValueError(
            f"{value} is below {MIN_CLIENT_VERSION}, the oldest client this server can speak to"
        )
    return value.strip()


def default_runner_command() -> list[str]:
    return [sys.executable, "-m", "starforge.runner"]


class Settings(BaseSettings):
    """Everything the control plane is configured with."""

    model_config = SettingsConfigDict(env_prefix="STARFORGE_", extra="forbid")

    home: Path = Field(default_factory=lambda: Path.home() / ".starforge")
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    url: str = Field(default="", description="the URL runners call back; derived when empty")
    # The CA that signed this server's certificate (PEM), when no default bundle holds it (a
    # lab's own CA): handed to every runner in its binding and to every job as
    # STARFORGE_CA_FILE, so their reports are sent over verified TLS (client/trust.py).
    tls_ca_file: Path | None = None
    storage_root: Path | None = None
    database_url: str | None = None
    executor: Literal["local", "slurm"] = "local"
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    runner_command: list[str] = Field(default_factory=default_runner_command)
    # The local executor forks trl jobs from a warm trainer that has torch, transformers and trl
    # imported (runner/jobfork.py); off, every job starts a fresh interpreter.
    warm_trainer: bool = True
    # Where jobs compute. ``cpu``: a node starts ``cpu_processes_per_node`` training processes
    # (gloo), whatever GPUs its profile names; ``gpu``: one process per GPU. ``auto``: ``cpu`` for
    # the local executor on a host where nvidia-smi lists no GPU (the virtual inventory), else
    # ``gpu`` (a Slurm server's own host usually has no GPU; its compute nodes do).
    devices: Literal["auto", "gpu", "cpu"] = "auto"
    cpu_processes_per_node: int = Field(default=1, ge=1)
    stop_grace_s: float = Field(default=10.0, ge=0)
    # Lifecycle: a pause waits this long for the checkpoint before SIGKILL; runners beat every
    # heartbeat_s and one silent for lost_after_s (counted from this server's start at the
    # earliest, so a restart never condemns runners that could not reach it) is node_lost.
    pause_grace_s: float = Field(default=120.0, ge=0)
    heartbeat_s: float = Field(default=5.0, gt=0)
    lost_after_s: float = Field(default=30.0, gt=0)
    # After its job ends, node 0's runner sends the curves the job could not deliver for at most
    # this long (retrying, with backoff) before it reports the exit; what is left the server
    # takes from the run's folder when it ends the run (services/observability/spooled.py).
    report_drain_s: float = Field(default=60.0, ge=0)
    embedded: bool = True
    profiles: list[ProfileDef] = Field(default_factory=default_profiles)
    inventory: list[NodeDef] | None = None
    quota_defaults: QuotaDefaults = Field(default_factory=QuotaDefaults)
    # A run queued this long goes ahead of fair share (oldest first) within its priority.
    fair_share_patience_s: float = Field(default=1800.0, ge=0)
    # Preemption: a queued run that cannot fit may pause (checkpoint first) lower-priority running
    # runs that can resume; none is preempted again within preempt_min_interval_s (no thrash).
    preemption: bool = True
    preempt_min_interval_s: float = Field(default=600.0, ge=0)
    hf_offline: bool = True
    # The oldest client this server lets users call it with (426 and the upgrade command below):
    # an admin raises it to make a lab upgrade; never below contract.api.MIN_CLIENT_VERSION. Runners
    # are held to that built-in minimum only, so the previous release's keep reporting.
    min_client_version: Annotated[str, AfterValidator(_check_min_client)] = MIN_CLIENT_VERSION
    # Request bodies, in bytes: a body beyond its route's limit is answered 413 and never kept
    # (Content-Length over the limit is refused before a byte is read; a longer stream is cut).
    max_body_bytes: int = Field(default=1 << 20, ge=1024)  # every route not named below
    max_submit_bytes: int = Field(default=64 << 20, ge=1024)  # /jobs and /blobs/missing
    max_ingest_bytes: int = Field(default=16 << 20, ge=1024)  # one metrics batch of a job
    max_blob_bytes: int = Field(default=8 << 30, ge=1024, le=MAX_FILE_BYTES)  # one uploaded file
    # A temporary upload not written to for this long belongs to a dead upload: removed at start
    # (an upload still streaming into a server that shares the store keeps writing, so it stays).
    stale_upload_s: float = Field(default=600.0, ge=0)
    # Jobs run as this user, so they cannot read the platform's files (the server's home, the
    # runners' bindings and records). None: on a root server a uid of its own per run (below),
    # else the server's own user; a name: every job as that one user; "" the server's own user.
    job_user: str | None = None
    # A root server with no job_user runs every attempt under a uid of its own from this range
    # (never two live runs on one uid, like systemd's DynamicUser), in the group of its member:
    # member_gid_base + the member's id. ``isolation: none`` lets a server that cannot separate
    # jobs (not root, or its storage under a closed folder) run the jobs of several users anyway.
    job_uid_range: tuple[int, int] = (61184, 64511)
    member_gid_base: int = Field(default=64512, ge=1000)
    isolation: Literal["auto", "none"] = "auto"
    # How long a console link (`sf job console`) signs a browser in; the token only reads.
    console_token_ttl_s: float = Field(default=4 * 3600, gt=0, le=7 * 24 * 3600)
    # Absolute (shared) inputs are admitted only under one of these folders; empty: refused.
    shared_roots: list[Path] = Field(default_factory=list)
    # Images (docs/images.md). ``containers``: podman runs jobs inside their image, none runs them
    # on the host (no digest is resolved), required refuses runs when podman does not work; unset:
    # podman if ``podman info`` works (probed once). ``runtime_images``: runtime id -> image, the
    # third rule of the resolution order. ``allowed_registries`` (HOST[:PORT][/PREFIX]) adds to
    # the admins' allowlist; both empty allows every registry. ``insecure_registries`` are spoken
    # to over plain HTTP (loopback registries always are).
    containers: Literal["podman", "none", "required"] | None = None
    runtime_images: dict[str, str] = Field(default_factory=dict)
    allowed_registries: list[str] = Field(default_factory=list)
    insecure_registries: list[str] = Field(default_factory=list)
    registry_timeout_s: float = Field(default=5.0, gt=0)
    # Gated-model preflight at admission (services/data/hub_preflight): a hub --model is looked up
    # on the hub with the user's HF_TOKEN secret. ``auto``: on when jobs reach the hub (hf_offline
    # false) and the server is not in HF_HUB_OFFLINE mode; ``off`` for air-gapped sites; ``strict``
    # rejects when the hub cannot be reached (``on`` only warns). ``hf_endpoint``: "" is
    # $HF_ENDPOINT, else huggingface_hub's default.
    hub_preflight: Literal["auto", "on", "off", "strict"] = "auto"
    hf_endpoint: str = ""
    # Running a lab (docs: ``sf admin usage|maintenance``, ``sf notify``). ``daily_gpu_hours``:
    # GPU-hours per user per UTC day for users an admin set none for (None: no daily limit).
    # Webhooks go to http(s) URLs only; ``notify_allow_private`` lets them reach loopback and
    # private addresses (None: only the embedded server, which is local to its one user, may);
    # ``notify_allow_cidrs``: ranges they may reach even so (e.g. [10.20.0.0/16] for a lab's own).
    daily_gpu_hours: float | None = Field(default=None, ge=0)
    # What a GPU-hour costs, per GPU series (e.g. {h200: 3.0}), in ``currency``: runs and
    # ``sf admin usage`` show money beside hours; a series without a price shows hours only.
    gpu_hour_prices: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    currency: str = Field(default="", max_length=12)
    notify_allow_private: bool | None = None
    notify_allow_cidrs: list[IPvAnyNetwork] = Field(default_factory=list)
    notify_backoff_s: float = Field(default=2.0, gt=0)  # first retry; doubles up to the max
    notify_backoff_max_s: float = Field(default=600.0, gt=0)
    notify_max_tries: int = Field(default=12, ge=1)
    notify_timeout_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        self.home = self.home.expanduser().resolve()
        if self.storage_root is None:
            self.storage_root = self.home / "storage"
        self.storage_root = self.storage_root.expanduser().resolve()
        if self.database_url is None:
            self.database_url = f"sqlite:///{self.home / 'server' / 'starforge.db'}"
        if self.inventory is None:
            self.inventory = detect_inventory()
        if self.jobs_on_cpu:  # published with the profiles: the client counts these processes
            self.profiles = [
                p
                if p.processes_per_node
                else p.model_copy(update={"processes_per_node": self.cpu_processes_per_node})
                for p in self.profiles
            ]
        # Resolved once, so a root given through a symlink still contains the inputs under it.
        self.shared_roots = [Path(os.path.abspath(p.expanduser())) for p in self.shared_roots]
        if self.tls_ca_file is not None:
            self.tls_ca_file = self.tls_ca_file.expanduser().resolve()
            _check_ca(self.tls_ca_file)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        yaml_file = _YAML_FILE.get()
        if yaml_file is not None and yaml_file.is_file():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)

    @property
    def jobs_on_cpu(self) -> bool:
        """Whether jobs train on the CPU (see ``devices``)."""
        if self.devices != "auto":
            return self.devices == "cpu"
        return self.executor == "local" and not gpu_names()

    # Typed views of the derived fields (never None after validation).
    @property
    def storage(self) -> Path:
        assert self.storage_root is not None
        return self.storage_root

    @property
    def db_url(self) -> str:
        assert self.database_url is not None
        return self.database_url

    @property
    def nodes(self) -> list[NodeDef]:
        assert self.inventory is not None
        return self.inventory

    @property
    def server_dir(self) -> Path:
        return self.home / "server"

    def tls_ca_pem(self) -> str:
        """The PEM text of ``tls_ca_file`` ("" when unset), read when a binding is written: a
        CA renewed in place reaches the next runs without a restart. A file gone since the
        start gives "": the runner then fails the attempt naming this setting."""
        if self.tls_ca_file is None:
            return ""
        try:
            return self.tls_ca_file.read_text(encoding="ascii")
        except (OSError, ValueError):
            return ""

    @property
    def job_user_name(self) -> str:
        """The one user every job runs as (a named ``job_user``); "" otherwise."""
        return self.job_user or ""

    @property
    def job_uids(self) -> list[int]:
        """The range each attempt takes a uid of its own from; empty when jobs do not (a named
        ``job_user``, a server that is not root or whose storage the uids cannot reach, and Slurm,
        where a uid must exist on every node: members' jobs run as their Unix accounts)."""
        if self.job_user is not None or os.geteuid() != 0 or self.executor == "slurm":
            return []
        assert self.storage_root is not None
        if _closed_folder(self.storage_root) is not None:
            return []
        return list(self.job_uid_range)

    @property
    def slurm_accounts(self) -> bool:
        """A root server on Slurm: it submits each member's jobs as the member's own Unix
        account (``sbatch --uid/--gid``, ``sf admin user set-unix``)."""
        return self.executor == "slurm" and os.geteuid() == 0

    def member_gid(self, user_id: int) -> int:
        return self.member_gid_base + user_id

    def containers_mode(self) -> Literal["podman", "none", "required"]:
        """The container runtime in force: the setting, else podman where ``podman info`` works."""
        return containers.mode_in_effect(self.containers)

    def containers_unavailable(self) -> bool:
        """``containers: required`` on a machine where podman does not work."""
        return self.containers_mode() == "required" and not containers.podman_works()

    def job_isolation(self) -> tuple[str, str]:
        """(who jobs run as, in words; a warning when jobs are not walled off from each other).

        A named ``job_user`` is taken as it is (every job shares it; a run it cannot reach fails
        at startup, naming the folder). Unnamed, a root server runs each attempt under a uid of
        its own (:attr:`job_uids`) when the storage root is open to them; a job whose program
        they cannot run fails at its start, naming the fix. Elsewhere (the embedded default keeps
        its storage under root's 0700 home) jobs run as the server's user, and ``sf server
        status`` says so."""
        shared = "jobs run as the server's user and can read what it can (docs/security.md)"
        if self.slurm_accounts:
            return "each member's own Unix account (sf admin user set-unix)", ""
        if self.job_user is not None:
            if not self.job_user:
                return "", shared
            return self.job_user, f"every job runs as {self.job_user}: runs are not walled off"
        if self.job_uids:
            first, last = self.job_uid_range
            return f"a uid of its own per run ({first}-{last})", ""
        if os.geteuid() != 0:
            return "", shared
        assert self.storage_root is not None
        return "", (
            f"jobs run as root, not isolated: a run's uid cannot enter "
            f"{_closed_folder(self.storage_root)}; put storage_root in a folder every user may "
            "enter (e.g. /srv/starforge), or name a job_user"
        )

    @property
    def separates_jobs(self) -> bool:
        """Whether two users' jobs run apart (uids of their own, or the admin said it does not
        matter: ``isolation: none``)."""
        return bool(self.job_uids) or self.slurm_accounts or self.isolation == "none"


def _check_ca(path: Path) -> None:
    """Refuse a ``tls_ca_file`` that runners could not use, when the server starts."""
    import ssl

    try:
        ssl.create_default_context(cadata=path.read_text(encoding="ascii"))
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise ValueError(f"tls_ca_file {path}: not a readable PEM certificate ({exc})") from None


def _closed_folder(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that other users may not enter, if any."""
    for folder in [*reversed(path.parents), path]:
        try:
            if not folder.stat().st_mode & stat.S_IXOTH:
                return folder
        except FileNotFoundError:
            return None  # made later under a folder already checked
    return None


def secure_home(settings: Settings) -> None:
    """Keep the server's secrets from its jobs (and from other local users): the server folder
    (database, token files, logs) 0700 and server.yaml 0600. The home itself stays traversable
    (0711: no listing) because the default storage root lives under it and jobs run there."""
    settings.server_dir.mkdir(parents=True, exist_ok=True)
    for path, mode in (
        (settings.home, 0o711),
        (settings.server_dir, 0o700),
        (settings.home / "server.yaml", 0o600),
    ):
        try:
            os.chmod(path, mode)
        except FileNotFoundError:
            continue  # no server.yaml: nothing to protect
        except PermissionError:
            continue  # a home this user does not own (a shared config folder): left as it is


def resolve_home(home: Path | str | None = None) -> Path:
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("STARFORGE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".starforge"


def load_settings(home: Path | str | None = None, **overrides: Any) -> Settings:
    """Settings for ``home`` (argument, else ``$STARFORGE_HOME``, else ``~/.starforge``)."""
    resolved = resolve_home(home)
    token = _YAML_FILE.set(resolved / "server.yaml")
    try:
        if home is not None:
            overrides["home"] = resolved
        return Settings(**overrides)
    finally:
        _YAML_FILE.reset(token)

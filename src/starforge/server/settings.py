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
import subprocess
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from starforge.contract.api import Quota
from starforge.contract.profiles import ProfileDef

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
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return virtual_inventory()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return virtual_inventory()
    names = [line.strip() for line in out.splitlines() if line.strip()]
    if not names:
        return virtual_inventory()
    host = os.uname().nodename or "local"
    return [NodeDef(name=host, series=series_of(names[0]), gpus=len(names))]


def default_runner_command() -> list[str]:
    return [sys.executable, "-m", "starforge.runner"]


class Settings(BaseSettings):
    """Everything the control plane is configured with."""

    model_config = SettingsConfigDict(env_prefix="STARFORGE_", extra="forbid")

    home: Path = Field(default_factory=lambda: Path.home() / ".starforge")
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    url: str = Field(default="", description="the URL runners call back; derived when empty")
    storage_root: Path | None = None
    database_url: str | None = None
    executor: Literal["local", "slurm"] = "local"
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    runner_command: list[str] = Field(default_factory=default_runner_command)
    stop_grace_s: float = Field(default=10.0, ge=0)
    # Lifecycle: a pause waits this long for the checkpoint before SIGKILL; runners beat every
    # heartbeat_s and one silent for lost_after_s (counted from this server's start at the
    # earliest, so a restart never condemns runners that could not reach it) is node_lost.
    pause_grace_s: float = Field(default=120.0, ge=0)
    heartbeat_s: float = Field(default=5.0, gt=0)
    lost_after_s: float = Field(default=30.0, gt=0)
    embedded: bool = True
    profiles: list[ProfileDef] = Field(default_factory=default_profiles)
    inventory: list[NodeDef] | None = None
    quota_defaults: QuotaDefaults = Field(default_factory=QuotaDefaults)
    # A run queued this long goes ahead of fair share (oldest first) within its priority.
    fair_share_patience_s: float = Field(default=1800.0, ge=0)
    hf_offline: bool = True

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

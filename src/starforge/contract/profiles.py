"""The ``--profile`` grammar and its resolution against the server's profile registry.

Grammar of one argument: ``[ROLE[,ROLE...]=]NAME[:TOTAL_GPUS]``.

* ``h200``      -> the registry's default shape for ``h200``;
* ``h200:N``    -> one node of N GPUs when N <= GPUs per node; otherwise N must be a whole
  multiple of GPUs per node and means N / GPUs-per-node full nodes (``h200:16`` = 2 x 8);
* ``train=h200:8 --profile rollout=h100:2`` -> named pools (a heterogeneous multi-pool job).

:func:`parse_profile_arg` checks only the syntax (no registry needed, runs on the laptop);
:func:`resolve` turns parsed requests into :class:`Pool` objects with a registry, once per
submission on each side (the CLI for its checks and ``--dry-run``, admission for the run's record);
a run's pools, with the profile's env as it was at admission, are then read back, never resolved
again. Every error names
the rule that was broken and lists what is valid.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import ConfigDict, Field

from starforge.contract.base import Contract
from starforge.contract.errors import ProfileError

_ARG = re.compile(
    r"^(?:(?P<roles>[A-Za-z][A-Za-z0-9_-]*(?:,[A-Za-z][A-Za-z0-9_-]*)*)=)?"
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?::(?P<gpus>[^:]*))?$"
)
FORMAT = "[ROLE[,ROLE]=]NAME[:TOTAL_GPUS], e.g. h200, h200:4, h200:16, train=h200:8"


class ProfileDef(Contract):
    """One entry of the server's profile registry."""

    name: str
    series: str
    gpus_per_node: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1, description="the default node count")
    env: dict[str, str] = Field(default_factory=dict)
    label: str = ""
    # Training processes per node; None: one per GPU. A server whose jobs run on the CPU (the
    # virtual inventory) publishes its ``cpu_processes_per_node`` here, so the client's checks
    # and ``--dry-run`` count the processes the runner will start.
    processes_per_node: int | None = Field(default=None, ge=1)


class ProfileRequest(Contract):
    """One parsed ``--profile`` argument."""

    model_config = ConfigDict(frozen=True)

    raw: str
    roles: tuple[str, ...] = ()
    name: str
    total_gpus: int | None = None


class Pool(Contract):
    """A set of identical nodes a run gets all at once."""

    name: str
    profile: str
    series: str
    nodes: int = Field(ge=1)
    # 0 only for a step run that needs no GPU (an export): the grammar never asks for 0.
    gpus_per_node: int = Field(ge=0)
    roles: list[str] = Field(default_factory=list)
    # The profile's env as it was at admission: editing the server's settings later never
    # changes a run that is already queued.
    env: dict[str, str] = Field(default_factory=dict)
    # The training processes each node starts (its launcher's ``--nproc_per_node``); 0, as in a
    # pool recorded before this field existed: one per GPU.
    processes_per_node: int = Field(default=0, ge=0)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def procs_per_node(self) -> int:
        """The processes each node runs: the recorded count, else one per GPU (at least one)."""
        return self.processes_per_node or max(self.gpus_per_node, 1)

    @property
    def world_size(self) -> int:
        """The training processes of the whole pool, every node's together."""
        return self.nodes * self.procs_per_node


def parse_profile_arg(raw: str) -> ProfileRequest:
    text = raw.strip()
    match = _ARG.match(text)
    if not match:
        raise ProfileError(
            f"--profile {raw!r} could not be parsed",
            hint=f"the format is {FORMAT}",
            details={"profile": raw},
        )
    gpus_text = match.group("gpus")
    total: int | None = None
    if gpus_text is not None:
        if not gpus_text.isdigit() or int(gpus_text) < 1:
            raise ProfileError(
                f"--profile {raw!r}: the GPU count {gpus_text!r} must be a positive whole number",
                hint=f"the format is {FORMAT}",
                details={"profile": raw},
            )
        total = int(gpus_text)
    roles = tuple(match.group("roles").split(",")) if match.group("roles") else ()
    if len(set(roles)) != len(roles):
        raise ProfileError(f"--profile {raw!r} names a role twice", details={"profile": raw})
    return ProfileRequest(raw=raw, roles=roles, name=match.group("name"), total_gpus=total)


def parse_profile_args(raws: list[str]) -> list[ProfileRequest]:
    if not raws:
        raise ProfileError(
            "--profile is required: it is the only way to say what resources the run gets",
            hint=f"add --profile {FORMAT}",
        )
    requests = [parse_profile_arg(r) for r in raws]
    if len(requests) > 1:
        unnamed = [r.raw for r in requests if not r.roles]
        if unnamed:
            raise ProfileError(
                "with several --profile arguments every one must name its roles "
                f"(ROLE=NAME[:N]); missing on: {', '.join(unnamed)}",
                hint="e.g. --profile train=h200:8 --profile rollout=h100:2",
            )
        seen: dict[str, str] = {}
        for r in requests:
            for role in r.roles:
                if role in seen:
                    raise ProfileError(
                        f"role {role!r} is given two pools ({seen[role]} and {r.raw})",
                        hint="each role lands on exactly one pool",
                    )
                seen[role] = r.raw
    return requests


def _shape(req: ProfileRequest, prof: ProfileDef) -> tuple[int, int]:
    gpn = prof.gpus_per_node
    if req.total_gpus is None:
        return prof.nodes, gpn
    if req.total_gpus <= gpn:
        return 1, req.total_gpus
    if req.total_gpus % gpn:
        raise ProfileError(
            f"--profile {req.raw!r}: profile {prof.name} has {gpn} GPUs per node, so the GPU "
            f"count must be at most {gpn} or a whole multiple of {gpn} (got {req.total_gpus})",
            hint=f"e.g. {prof.name}:{gpn} or {prof.name}:{2 * gpn}",
            details={"profile": req.raw, "gpus_per_node": gpn},
        )
    return req.total_gpus // gpn, gpn


def check_roles(requests: Sequence[ProfileRequest], method_roles: Sequence[str]) -> None:
    """Named pools carry exactly the method's roles: none unknown, none left out."""
    if not any(r.roles for r in requests):
        return  # one unnamed pool carries every role
    roles = list(method_roles) or ["trainer"]
    carried = [role for r in requests for role in r.roles]
    unknown = sorted(set(carried) - set(roles))
    if unknown:
        raise ProfileError(
            f"--profile names roles the method does not have: {', '.join(unknown)}",
            hint=f"the method's roles: {', '.join(roles)}",
        )
    missing = [r for r in roles if r not in carried]
    if missing:
        raise ProfileError(
            f"every role of the method must land on a pool; missing: {', '.join(missing)}",
            hint=f"the method's roles: {', '.join(roles)}",
        )


def resolve(
    requests: Sequence[ProfileRequest],
    registry: Sequence[ProfileDef],
    method_roles: Sequence[str],
) -> list[Pool]:
    """Materialise parsed requests into pools (the profile's env snapshotted into each).

    Every method role lands on exactly one pool.
    """
    by_name = {p.name: p for p in registry}
    roles = list(method_roles) or ["trainer"]
    pools: list[Pool] = []
    for req in requests:
        prof = by_name.get(req.name)
        if prof is None:
            valid = ", ".join(sorted(by_name)) or "(none configured)"
            raise ProfileError(
                f"unknown profile {req.name!r} in --profile {req.raw!r}",
                hint=f"valid profiles: {valid}",
                details={"profile": req.raw},
            )
        nodes, gpn = _shape(req, prof)
        pool_roles = list(req.roles) if req.roles else roles
        name = "all" if not req.roles else req.roles[0]
        pools.append(
            Pool(
                name=name,
                profile=prof.name,
                series=prof.series,
                nodes=nodes,
                gpus_per_node=gpn,
                roles=pool_roles,
                env=dict(prof.env),
                processes_per_node=prof.processes_per_node or gpn,
            )
        )
    check_roles(requests, method_roles)
    return pools

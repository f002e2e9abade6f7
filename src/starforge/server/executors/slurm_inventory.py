"""The inventory as Slurm sees it: nodes, GPUs per series, partitions, from ``sinfo --json``.

Pure parsing (table-tested on recorded answers). A node's series is the series whose GRES type
it carries (``gpu:h200:8`` is series ``h200`` unless ``slurm.partitions`` maps another series to
GRES type ``h200``). Nodes that cannot take work are left out, so ``sf status`` and admission's
never-fits check see the cluster as it is: down, drained or draining, failing, not responding,
powered down, future or unknown nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from starforge.contract.errors import Rejected
from starforge.contract.profiles import Pool
from starforge.server.settings import NodeDef, SlurmSettings

UNUSABLE_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FUTURE", "UNKNOWN"})
UNUSABLE_FLAGS = frozenset(
    {"DRAIN", "DRAINED", "DRAINING", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN"}
)
_GRES = re.compile(r"^gpu:(?P<type>[^:(]+):(?P<n>\d+)")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    partitions: tuple[str, ...]
    gres_type: str
    gpus: int
    usable: bool


@dataclass(frozen=True)
class Cluster:
    nodes: list[SlurmNode]

    @property
    def partitions(self) -> set[str]:
        return {p for n in self.nodes for p in n.partitions}

    def address(self, node: str) -> str:
        return next((n.address for n in self.nodes if n.name == node), node)


def _states(raw: dict[str, Any]) -> set[str]:
    state = raw.get("state")
    states = state if isinstance(state, list) else [state]
    states += raw.get("state_flags") or []
    return {str(s).upper() for s in states if s}


def _gpus(gres: str) -> tuple[str, int]:
    for part in gres.split(","):
        match = _GRES.match(part.strip())
        if match:
            return match["type"], int(match["n"])
    return "", 0


def parse_nodes(payload: dict[str, Any]) -> Cluster:
    """The nodes of one ``sinfo --json`` (or ``scontrol show node --json``) answer."""
    nodes = []
    for raw in payload.get("nodes") or []:
        states = _states(raw)
        gres_type, gpus = _gpus(str(raw.get("gres") or ""))
        usable = not (states & UNUSABLE_STATES or states & UNUSABLE_FLAGS)
        nodes.append(
            SlurmNode(
                name=str(raw["name"]),
                address=str(raw.get("address") or raw["name"]),
                partitions=tuple(raw.get("partitions") or ()),
                gres_type=gres_type,
                gpus=gpus,
                usable=usable,
            )
        )
    return Cluster(sorted(nodes, key=lambda n: n.name))


def series_of_type(gres_type: str, settings: SlurmSettings) -> str:
    """The series a GRES type stands for: the mapped series, else the type's own name."""
    for series, target in sorted(settings.partitions.items()):
        if target.gres_type == gres_type:
            return series
    return gres_type


def inventory(cluster: Cluster, settings: SlurmSettings) -> list[NodeDef]:
    """StarForge's inventory: usable nodes with GPUs, one series each."""
    return [
        NodeDef(name=n.name, series=series_of_type(n.gres_type, settings), gpus=n.gpus)
        for n in cluster.nodes
        if n.usable and n.gpus > 0
    ]


def check_pools(pools: list[Pool], cluster: Cluster, settings: SlurmSettings) -> None:
    """Reject a run whose series has no partition on this cluster (nothing is created)."""
    known = cluster.partitions
    for pool in pools:
        target = settings.target(pool.series)
        if target.partition not in known:
            mapped = pool.series in settings.partitions
            how = "maps to" if mapped else "has no entry in slurm.partitions, so it maps to"
            raise Rejected(
                f"GPU series {pool.series!r} has no Slurm partition: it {how} partition "
                f"{target.partition!r}, which this cluster does not have",
                hint=(
                    "map the series in the server's settings (server.yaml: slurm.partitions."
                    f"{pool.series}: {{partition: ..., gres_type: ...}}); partitions here: "
                    + ", ".join(sorted(known))
                ),
                details={"series": pool.series, "setting": "slurm.partitions"},
            )

"""What a framework check reads: the method, the resolved config and, when known, the pools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starforge.catalog.loader import Method
from starforge.contract.config import MISSING, get_path
from starforge.contract.profiles import Pool


@dataclass(frozen=True)
class CheckContext:
    method: Method
    config: dict[str, Any]
    pools: list[Pool] | None = None  # None: the profile is not known yet (sf validate)

    def value(self, path: str) -> Any:
        """The config's value at ``path``, else the default of the parameter bound there."""
        found = get_path(self.config, path)
        if found is not MISSING:
            return found
        for param in self.method.params.values():
            if param.path == path:
                return param.default
        return None

    def gpus(self, role: str | None = None) -> int | None:
        """GPUs of the pool carrying ``role`` (or of all pools), when the profile is known."""
        if self.pools is None:
            return None
        return sum(p.total_gpus for p in self._pools(role))

    def processes(self, role: str | None = None) -> tuple[int, str] | None:
        """The training processes of the pools carrying ``role`` (the data-parallel world size
        of a one-pool method) and how they add up, when the profile is known."""
        if self.pools is None:
            return None
        pools = self._pools(role)
        how = " + ".join(f"{p.nodes} node(s) x {p.procs_per_node} per node" for p in pools)
        return sum(p.world_size for p in pools), how

    def _pools(self, role: str | None) -> list[Pool]:
        assert self.pools is not None
        return [p for p in self.pools if role is None or role in p.roles] or self.pools

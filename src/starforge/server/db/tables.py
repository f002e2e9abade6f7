"""Every ORM table of the control plane: importing this module registers them all on the
declarative metadata (the core tables, quotas, metrics), as the migrations create them."""

from __future__ import annotations

from starforge.server.db import (
    blobs,
    datasets,
    images,
    labops,
    leadership,
    metrics,
    models,
    packs,
    reactions,
    registries,
    resources,
    secrets,
    steps,
    sweeps,
)

Base = models.Base
__all__ = [
    "Base",
    "blobs",
    "datasets",
    "images",
    "labops",
    "leadership",
    "metrics",
    "models",
    "packs",
    "reactions",
    "registries",
    "resources",
    "secrets",
    "steps",
    "sweeps",
]

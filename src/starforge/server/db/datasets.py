"""Platform datasets: one row per dataset (its owner, name, visibility) and one per version.

A version's files are a manifest over the shared content-addressed blob store (the same store as
job packages); the manifest itself is stored there too, as canonical JSON named by its sha256
(``manifest_sha256``), which is what a run records and the runner fetches. Versions are immutable:
no code path updates ``files`` or ``manifest_sha256`` once the row exists.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base, UTCDateTime, utcnow


class Dataset(Base):
    """``OWNER/NAME``: private (its owner only) unless ``public``."""

    __tablename__ = "datasets"

    owner: Mapped[str] = mapped_column(String(100), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class DatasetVersion(Base):
    """``OWNER/NAME@VERSION``: immutable once committed."""

    __tablename__ = "dataset_versions"

    owner: Mapped[str] = mapped_column(String(100), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[str] = mapped_column(String(100), primary_key=True)
    files: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # FileEntry, sorted by path
    manifest_sha256: Mapped[str] = mapped_column(String(64))
    file_count: Mapped[int] = mapped_column(Integer, default=0)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    readme: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

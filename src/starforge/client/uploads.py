"""Uploading a package's files: small ones many to a request, big ones streamed one each.

Files up to :data:`~starforge.contract.blobbatch.SMALL_BLOB_BYTES` go in batches of about
:data:`~starforge.contract.blobbatch.BATCH_BYTES` (``POST /blobs/batch``: one request and one
sync on the server per batch, instead of one of each per file); bigger files are streamed with
``PUT /blobs/<sha256>``. A server that predates batches answers the batch route with "not
found": the files then go one per request, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from starforge.client.http import Client
from starforge.contract import blobbatch
from starforge.contract.errors import NotFound, StarForgeError
from starforge.contract.jobspec import FileEntry


def _no_batches(exc: StarForgeError) -> bool:
    """An older server: no such route (404), or only ``PUT /blobs/{sha256}`` matches (405)."""
    return exc.code == NotFound.code or "method not allowed" in exc.message.lower()


def upload_files(
    client: Client,
    root: Path,
    entries: Iterable[FileEntry],
    progress: Callable[[int], None] | None = None,
) -> None:
    """Upload each entry's file (``root / entry.path``) under its sha256."""
    small: list[FileEntry] = []
    for entry in entries:
        if entry.size <= blobbatch.SMALL_BLOB_BYTES:
            small.append(entry)
        else:
            client.upload_blob(entry.sha256, root / entry.path, progress)
    batching = True
    for group in _groups(small):
        if batching:
            try:
                body = blobbatch.encode((e.sha256, (root / e.path).read_bytes()) for e in group)
                client.upload_blob_batch(body)
                if progress:
                    progress(sum(e.size for e in group))
                continue
            except StarForgeError as exc:
                if not _no_batches(exc):
                    raise
                batching = False  # an older server: one request per file from now on
        for entry in group:
            client.upload_blob(entry.sha256, root / entry.path, progress)


def _groups(entries: list[FileEntry]) -> Iterable[list[FileEntry]]:
    """``entries`` in groups of about BATCH_BYTES (a digest is sent once)."""
    group: list[FileEntry] = []
    size = 0
    seen: set[str] = set()
    for entry in entries:
        if entry.sha256 in seen:
            continue
        seen.add(entry.sha256)
        if group and size + entry.size > blobbatch.BATCH_BYTES:
            yield group
            group, size = [], 0
        group.append(entry)
        size += entry.size
    if group:
        yield group

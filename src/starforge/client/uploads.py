"""Uploading a package's files: small ones many to a request, big ones streamed one each.

Files up to :data:`~starforge.contract.blobbatch.SMALL_BLOB_BYTES` go in batches of at most
:data:`~starforge.contract.blobbatch.BATCH_BYTES` and :data:`BATCH_FILES` files
(``POST /blobs/batch``: one request and one sync on the server per batch, instead of one of each
per file), up to :data:`IN_FLIGHT` batches at a time, so this process reads and frames the next
batch while the server verifies and stores the one before; bigger files are streamed with
``PUT /blobs/<sha256>``. A server that predates batches answers the batch route with "not
found" (the first batch is sent alone to learn that): the files then go one per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from starforge.client.http import Client
from starforge.contract import blobbatch
from starforge.contract.errors import NotFound, StarForgeError
from starforge.contract.jobspec import FileEntry

BATCH_FILES = 2500  # several batches keep the client and the server busy at the same time
IN_FLIGHT = 2  # batches sent and not yet answered


def _no_batches(exc: StarForgeError) -> bool:
    """An older server: no such route (404), or only ``PUT /blobs/{sha256}`` matches (405)."""
    return exc.code == NotFound.code or "method not allowed" in exc.message.lower()


def upload_files(
    client: Client,
    root: Path,
    entries: Iterable[FileEntry],
    progress: Callable[[int], None] | None = None,
    contents: Mapping[str, bytes] | None = None,
) -> None:
    """Upload each entry's file (``root / entry.path``) under its sha256; a small file whose
    content the packer kept (``contents``, by sha256) is sent from memory."""
    kept = contents or {}
    small: list[FileEntry] = []
    for entry in entries:
        if entry.size <= blobbatch.SMALL_BLOB_BYTES:
            small.append(entry)
        else:
            client.upload_blob(entry.sha256, root / entry.path, progress)
    groups = iter(_groups(small))
    first = next(groups, None)
    if first is None:
        return
    try:
        client.upload_blob_batch(_frame(root, first, kept))
    except StarForgeError as exc:
        if not _no_batches(exc):
            raise
        # An older server: one request per file.
        for group in [first, *groups]:
            for entry in group:
                client.upload_blob(entry.sha256, root / entry.path, progress)
        return
    if progress:
        progress(sum(e.size for e in first))
    _send_concurrently(client, root, groups, progress, kept)


def _send_concurrently(
    client: Client,
    root: Path,
    groups: Iterable[list[FileEntry]],
    progress: Callable[[int], None] | None,
    kept: Mapping[str, bytes],
) -> None:
    """The remaining batches, at most IN_FLIGHT at a time; the first failure is raised (the
    batches still in flight are awaited first, so no request outlives this call)."""
    pending: deque[tuple[Future[None], int]] = deque()

    def settle(future: Future[None], size: int) -> None:
        future.result()  # raises the batch's error
        if progress:
            progress(size)

    with ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="sf-upload") as pool:
        try:
            for group in groups:
                while len(pending) >= IN_FLIGHT:
                    settle(*pending.popleft())
                body = _frame(root, group, kept)
                pending.append(
                    (pool.submit(client.upload_blob_batch, body), sum(e.size for e in group))
                )
            while pending:
                settle(*pending.popleft())
        except BaseException:
            for future, _ in pending:
                future.cancel()
            raise


def _frame(root: Path, group: list[FileEntry], kept: Mapping[str, bytes]) -> bytes:
    """The batch body of ``group``: what the packer kept (exactly what it hashed and checked;
    an empty file's ``b""`` included), else the file as it is now (the server checks it)."""
    base = str(root)
    blobs = []
    for entry in group:
        data = kept.get(entry.sha256)
        blobs.append((entry.sha256, _read(f"{base}/{entry.path}") if data is None else data))
    return blobbatch.encode(blobs)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _groups(entries: list[FileEntry]) -> Iterable[list[FileEntry]]:
    """``entries`` in groups of at most BATCH_BYTES and BATCH_FILES (a digest is sent once)."""
    group: list[FileEntry] = []
    size = 0
    seen: set[str] = set()
    for entry in entries:
        if entry.sha256 in seen:
            continue
        seen.add(entry.sha256)
        if group and (size + entry.size > blobbatch.BATCH_BYTES or len(group) >= BATCH_FILES):
            yield group
            group, size = [], 0
        group.append(entry)
        size += entry.size
    if group:
        yield group

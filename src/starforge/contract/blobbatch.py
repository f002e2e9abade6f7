"""The wire form of a batch of small blobs: many files in one ``POST /blobs/batch`` body.

A body is a sequence of frames, each ``<64 lowercase hex sha256><8-byte big-endian size>`` and
then that many bytes of content (no padding, no trailer). Pure functions, no I/O: the client
frames, the server parses, and checks each blob's content against its digest itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from starforge.contract.errors import UsageError
from starforge.contract.names import is_sha256

MEDIA_TYPE = "application/x-starforge-blob-batch"
SMALL_BLOB_BYTES = 1 << 20  # the client batches files up to this size...
BATCH_BYTES = 8 << 20  # ...into bodies of about this size; bigger files go one per request
_HEADER = 64 + 8


def header(digest: str, size: int) -> bytes:
    """One frame's header: the digest and the size of the content that follows it."""
    return digest.encode("ascii") + size.to_bytes(8, "big")


def frame(digest: str, data: bytes) -> bytes:
    """One blob's frame."""
    return header(digest, len(data)) + data


def encode(blobs: Iterable[tuple[str, bytes]]) -> bytes:
    """The body of ``blobs``: each content is copied once, into the body (headers and contents
    are joined in one pass, not framed one by one first)."""
    parts: list[bytes] = []
    for digest, data in blobs:
        parts.append(header(digest, len(data)))
        parts.append(data)
    return b"".join(parts)


def parse(body: bytes) -> list[tuple[str, memoryview]]:
    """The (digest, content) frames of ``body``; a cut or malformed body raises UsageError."""
    view = memoryview(body)
    found: list[tuple[str, memoryview]] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < _HEADER:
            raise _bad(f"a frame header is cut at byte {pos}")
        try:
            digest = bytes(view[pos : pos + 64]).decode("ascii")
        except UnicodeDecodeError:
            digest = ""
        if not is_sha256(digest):
            raise _bad(f"the frame at byte {pos} does not start with a sha256 digest")
        size = int.from_bytes(view[pos + 64 : pos + _HEADER], "big")
        start = pos + _HEADER
        if size > len(view) - start:
            raise _bad(f"the frame of {digest} says {size} bytes but the body ends first")
        found.append((digest, view[start : start + size]))
        pos = start + size
    return found


def _bad(what: str) -> UsageError:
    return UsageError(
        f"malformed blob batch: {what}",
        hint="each frame is a 64-hex sha256, an 8-byte big-endian size, then the content",
    )

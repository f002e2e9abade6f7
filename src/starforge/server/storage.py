"""The storage root: content-addressed blobs and run directories.

Layout (one root, the same path on every node)::

    <root>/blobs/sha256/<first 2 hex>/<remaining 62 hex>     a blob as a file of its own
    <root>/blobs/packs/<32 hex>.pack                        the blobs of one upload batch
    <root>/runs/<user>/<project>/<experiment>/<run_id>/{work,out,logs,state}

(named in :mod:`starforge.contract.layout`, the one place the server, the runner and the SDK
agree on). Guarantees: a blob path exists only with content that hashes to its name (written to a
temporary file in the same directory, fsynced, verified while streaming, then renamed into
place), so a crash or a bad upload never leaves a half-written or wrong blob; an upload is cut off
at its size limit, and the temporary file of a killed upload is removed at the next start. A
packed blob (``services.data.blobs.store_batch``) is stored once the database records its extent
(``db.packs``, asked through ``locate``); :meth:`Storage.open_blob` reads either kind, exactly
the blob's bytes, and :meth:`Storage.has` / :meth:`Storage.missing` count both.

A run's own files written when it is placed (``run.json``, the bindings) are replaced atomically
(temporary file, rename; mode 0600 where they carry a secret) but not fsynced: they are derived
from the database's committed rows and must survive a killed process, which the page cache
guarantees; across a power cut they are as durable as SQLite's commits in WAL mode with
``synchronous=NORMAL``. Two fsyncs per file cost about 15 ms on this kind of disk, inside the
scheduler's transaction, per placed run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from starforge.contract.atomic import write_json_atomic
from starforge.contract.datasets import resolved_of
from starforge.contract.errors import BlobDigestMismatch, BodyTooLarge, InvalidName
from starforge.contract.jobspec import Manifest
from starforge.contract.layout import RunLayout, StorageLayout
from starforge.contract.names import is_sha256
from starforge.contract.packs import Extent, open_extent

Locate = Callable[[list[str]], dict[str, Extent]]


class RunNames(Protocol):
    """What names a run's folder (a ``db.models.Run`` row, or anything with these names)."""

    user: str
    project: str
    experiment: str
    id: str


def _check_digest(digest: str) -> str:
    if not is_sha256(digest):
        raise InvalidName(
            f"{digest!r} is not a sha256 digest",
            hint="use 64 lowercase hex characters",
            details={"kind": "sha256", "value": digest},
        )
    return digest


UPLOAD_PREFIX, UPLOAD_SUFFIX = ".upload.", ".tmp"


class BlobWriter:
    """Streams one upload into the store; :meth:`commit` verifies and publishes it.

    The content is hashed as it arrives and cut off past ``max_bytes`` (the temporary file is
    removed and :class:`BodyTooLarge` raised). When the store already holds the digest, nothing
    is written to disk: the upload is only hashed, so a re-upload proves the sender has the
    content without costing the store a second copy.
    """

    def __init__(self, store: Storage, digest: str, *, max_bytes: int | None = None) -> None:
        self.digest = _check_digest(digest)
        self.final = store.blob_path(digest)
        self.max_bytes = max_bytes
        self._hash = hashlib.sha256()
        self.size = 0
        self._tmp: Path | None = None
        self._fh: BinaryIO | None = None
        if not self.final.is_file():
            self.final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(
                prefix=UPLOAD_PREFIX, suffix=UPLOAD_SUFFIX, dir=self.final.parent
            )
            self._tmp = Path(tmp)
            self._fh = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.max_bytes is not None and self.size > self.max_bytes:
            self.abort()
            raise BodyTooLarge(
                f"the upload of {self.digest} is larger than the blob limit of "
                f"{self.max_bytes} bytes",
                hint="a server admin can raise max_blob_bytes in server.yaml",
                details={"limit": self.max_bytes, "sha256": self.digest},
            )
        self._hash.update(chunk)
        if self._fh is not None:
            self._fh.write(chunk)

    def commit(self) -> int:
        """Publish the blob if it hashes to its name; else discard it and raise."""
        try:
            actual = self._hash.hexdigest()
            if actual != self.digest:
                raise BlobDigestMismatch(
                    f"the uploaded content hashes to {actual}, not to its name {self.digest}",
                    hint="the file changed while it was uploaded or the upload was cut; "
                    "submit again",
                    details={"expected": self.digest, "actual": actual, "size": self.size},
                )
            if self._fh is not None and self._tmp is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                os.chmod(self._tmp, 0o644)
                os.replace(self._tmp, self.final)
            return self.size
        finally:
            self.abort()

    def abort(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


class Storage:
    """Paths under one storage root, and the few operations that must be atomic."""

    def __init__(self, root: Path, locate: Locate | None = None) -> None:
        """``locate``: the extents of the packed ones of some digests (the runtime asks
        ``db.packs.locate``); without it (tests, tools), only blobs stored as files of their own
        are seen."""
        self.root = Path(root)
        self.layout = StorageLayout(self.root)
        self._locate = locate
        # The layout's shard folder, taken once: a package names thousands of blobs, and one
        # string join each costs far less than building each path part by part.
        self._shards = str(self.layout.blob("0" * 64).parent.parent)

    def close_private(self) -> None:
        """The uploads (the blob store) and the dataset cache are the platform's alone: a job
        reads its package and its datasets through its own run (runner/datasets.py), never
        here, so no job's uid reads another member's upload."""
        for folder in (self.root / "blobs", self.root / "cache" / "datasets"):
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o700)

    # ---- blobs -------------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return Path(self.blob_file(_check_digest(digest)))

    def blob_file(self, digest: str) -> str:
        """Where a *checked* sha256's blob lives, as a string (no check, no ``Path``): for
        callers that handle thousands of digests they have already validated."""
        return f"{self._shards}/{digest[:2]}/{digest[2:]}"

    def path(self, digest: str) -> Path:
        return self.blob_path(digest)

    def has(self, digest: str) -> bool:
        return not self.missing([digest])

    def missing(self, digests: list[str]) -> list[str]:
        """Those of ``digests`` the store holds neither as a file nor in a pack."""
        wanted = set(digests)
        # The packs first: a package's small files are packed, and one query answers for 500
        # of them where a file system lookup each would cost a stat per file.
        located = self.locate(sorted(d for d in wanted if is_sha256(d)))
        here = {p: self.layout.pack(p).is_file() for p in {e.pack for e in located.values()}}
        packed = {d for d, e in located.items() if here[e.pack]}  # a lost pack: its blobs too
        return sorted(
            d for d in wanted - packed if not (is_sha256(d) and os.path.isfile(self.blob_file(d)))
        )

    def locate(self, digests: list[str]) -> dict[str, Extent]:
        """The pack extents of the packed ones of ``digests`` (checked sha256s)."""
        if self._locate is None or not digests:
            return {}
        return self._locate(digests)

    def pinned(self, digests: list[str], known: dict[str, Extent] | None = None) -> Storage:
        """This store with the extents of ``digests`` looked up once (or given: ``known``, what
        ``db.packs.locate`` answered for them in the caller's snapshot): one request asks about
        its package's blobs several times (admission: the stored check, the content check, the
        config), and each answer would otherwise be a database query. Other digests are still
        looked up when asked; whether a pack file is there is still asked each time."""
        asked = {d for d in digests if is_sha256(d)}
        if known is None:
            known = self.locate(sorted(asked))

        def locate(wanted: list[str]) -> dict[str, Extent]:
            found = {d: known[d] for d in wanted if d in known}
            rest = [d for d in wanted if d not in asked]
            if rest:
                found.update(self.locate(rest))
            return found

        return Storage(self.root, locate)

    def open_blob(self, digest: str, extents: Mapping[str, Extent] | None = None) -> BinaryIO:
        """A binary reader of exactly the blob's bytes, a file of its own or packed; raises
        :class:`FileNotFoundError` when the store does not hold it. ``extents``: what
        :meth:`locate` answered for many digests at once (a reader of thousands of blobs asks
        once, not once per blob); a digest it lacks is looked up."""
        try:
            return open(self.blob_file(_check_digest(digest)), "rb")
        except FileNotFoundError:
            extent = (extents or {}).get(digest) or self.locate([digest]).get(digest)
            if extent is None:
                raise
        return open_extent(self.layout.pack(extent.pack), extent)

    def head(
        self, digest: str, size: int, extents: Mapping[str, Extent] | None = None
    ) -> bytes | None:
        """The first ``size`` bytes of a stored blob, or None when the store lacks it."""
        try:
            with self.open_blob(digest, extents) as fh:
                return fh.read(size)
        except FileNotFoundError:
            return None

    def heads(self, digests: list[str], size: int) -> dict[str, bytes]:
        """The first ``size`` bytes of each stored blob of ``digests`` (absent ones left out):
        one lookup of the packs, and one open per pack rather than one per blob."""
        extents = self.locate(sorted({d for d in digests if is_sha256(d)}))
        found: dict[str, bytes] = {}
        by_pack: dict[str, list[str]] = {}
        for digest, extent in extents.items():
            by_pack.setdefault(extent.pack, []).append(digest)
        unpacked = [d for d in set(digests) - extents.keys() if is_sha256(d)]
        for pack, packed in by_pack.items():
            try:
                fd = os.open(self.layout.pack(pack), os.O_RDONLY)
            except FileNotFoundError:  # a lost pack: its blobs may be files of their own again
                unpacked.extend(packed)
                continue
            try:
                for digest in packed:
                    extent = extents[digest]
                    found[digest] = os.pread(fd, min(size, extent.size), extent.offset)
            finally:
                os.close(fd)
        for digest in unpacked:
            path = self.blob_file(digest)  # a file of its own, or absent
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
                found[digest] = fh.read(size)
        return found

    def read_blob(self, digest: str) -> bytes:
        """A stored blob's whole content (small blobs: configs, manifests)."""
        with self.open_blob(digest) as fh:
            return fh.read()

    def blob_writer(self, digest: str, *, max_bytes: int | None = None) -> BlobWriter:
        return BlobWriter(self, digest, max_bytes=max_bytes)

    def clean_uploads(self, stale_s: float, *, now: float | None = None) -> list[Path]:
        """Remove temporary uploads nobody has written to for ``stale_s`` seconds (left by an
        upload that was killed); return what was removed."""
        blobs = self.layout.blob("0" * 64).parent.parent  # the folder of the shards, per layout
        if not blobs.is_dir():
            return []
        cutoff = (time.time() if now is None else now) - stale_s
        removed = []
        for tmp in blobs.glob(f"*/{UPLOAD_PREFIX}*{UPLOAD_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                if tmp.stat().st_mtime <= cutoff:
                    tmp.unlink()
                    removed.append(tmp)
        return removed

    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` under its own digest (tests and small server-made files)."""
        digest = hashlib.sha256(data).hexdigest()
        writer = self.blob_writer(digest)
        writer.write(data)
        writer.commit()
        return digest

    # ---- run directories ---------------------------------------------------------------------

    def run_layout(self, user: str, project: str, experiment: str, run_id: str) -> RunLayout:
        return self.layout.run(user, project, experiment, run_id)

    def run_dir(self, user: str, project: str, experiment: str, run_id: str) -> Path:
        return self.run_layout(user, project, experiment, run_id).dir

    def layout_of(self, run: RunNames) -> RunLayout:
        """The files of ``run`` (its folder, ``out``, ``logs``, ...), named by its row."""
        return self.run_layout(run.user, run.project, run.experiment, run.id)

    def make_run_dir(self, run_dir: Path) -> None:
        for sub in RunLayout(run_dir).subdirs:
            sub.mkdir(parents=True, exist_ok=True)

    # The path helpers below take the run dir the database keeps; the names come from RunLayout.

    @staticmethod
    def log_path(run_dir: Path, attempt: int, node_rank: int = 0) -> Path:
        return RunLayout(run_dir).log(attempt, node_rank)

    @staticmethod
    def run_json_path(run_dir: Path) -> Path:
        return RunLayout(run_dir).run_json

    @staticmethod
    def binding_path(run_dir: Path, attempt: int, node_rank: int) -> Path:
        return RunLayout(run_dir).binding(attempt, node_rank)

    @staticmethod
    def exit_record_path(run_dir: Path, attempt: int, node_rank: int) -> Path:
        return RunLayout(run_dir).exit_record(attempt, node_rank)

    def write_run_json(
        self,
        run_dir: Path,
        spec: dict[str, Any],
        manifest: dict[str, Any],
        config: dict[str, Any] | None = None,
    ) -> None:
        """``config``: the experiment's config admission composed (the runner reads it).
        ``packs``: where the packed blobs of the package and of the run's datasets lie, since
        the runner has no database (``contract.packs``)."""
        self.make_run_dir(run_dir)
        data: dict[str, Any] = {"spec": spec, "manifest": manifest}
        if config is not None:
            data["config"] = config
        packs = self.locate(sorted(self._run_digests(manifest, config)))
        if packs:
            data["packs"] = {d: e.wire() for d, e in sorted(packs.items())}
        write_json_atomic(self.run_json_path(run_dir), data, durable=False)

    def _run_digests(self, manifest: dict[str, Any], config: dict[str, Any] | None) -> set[str]:
        """The blobs a run reads: its package's and its datasets' files."""
        digests = {str(f.get("sha256")) for f in manifest.get("files") or []}
        for resolved in resolved_of(config).values():
            try:
                dataset = Manifest.read(self.read_blob(resolved.manifest_sha256))
            except (OSError, ValueError):
                continue  # the runner says the dataset's manifest is missing or corrupt
            digests.update(dataset.digests())
        return digests

    def write_binding(self, path: Path, binding: dict[str, Any]) -> None:
        # The binding carries the run token in plain text: only the owner may read it.
        write_json_atomic(path, binding, mode=0o600, durable=False)

    @staticmethod
    def read_exit_record(path: Path) -> dict[str, Any] | None:
        """The runner's exit record, or None when it is absent or unreadable (half-written)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exit_code"), int):
            return None
        return data

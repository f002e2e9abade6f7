"""The job's secrets on the runner's side: fetch at start, hand to the job, mask in the log.

The binding and ``run.json`` carry only the NAMES a run asked for. At start the runner asks the
control plane for the values (``POST /runs/{id}/secrets`` with its run token, for its attempt)
and hands each to the job: as an environment variable of its name, or (``as: file``) as a 0600
file of the job's user under the work dir whose path is in ``<NAME>_FILE`` (removed when the
attempt ends). In a container the values travel in podman's environment (``-e NAME``), never in
its argv, where any local user could read them.

:class:`Masker` replaces every value in the job's output with ``***`` before the output reaches
the log. It works on a stream: whatever ends the buffered text and could still be the start of a
value is held back until the next read, so a value split across reads (or lines) is masked too.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import IO, Any

from starforge.client.secrets import for_run
from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError, ServerUnreachable, StarForgeError
from starforge.contract.secrets import (
    FILE_SUFFIX,
    Mount,
    SecretRequest,
    SecretValue,
    merge_requests,
    parse_config_secrets,
)
from starforge.runner.report import client_for

MASK = b"***"
MIN_MASKED_BYTES = 4  # shorter values would mask ordinary text; they are still delivered
FETCH_TRIES = 4
SECRETS_DIR = ".starforge/secrets"


def requested(spec_secrets: list[SecretRequest], config: dict[str, Any] | None) -> list[str]:
    try:
        from_config = parse_config_secrets(config or {})
    except ValueError:
        from_config = []  # admission refused a malformed list; here it is just nothing extra
    return [r.name for r in merge_requests(from_config, spec_secrets)]


def fetch(binding: Binding, url: str) -> list[SecretValue]:
    """The values for this attempt, with a few retries while the server is away."""
    for attempt in range(FETCH_TRIES):
        try:
            with client_for(binding, url) as client:
                return for_run(client, binding.run_id, binding.attempt, binding.node_rank).secrets
        except ServerUnreachable:
            if attempt == FETCH_TRIES - 1:
                raise
            time.sleep(0.5 * 2**attempt)
        except StarForgeError as exc:
            raise RunnerError(f"the server refused this attempt's secrets: {exc.message}") from None
    return []


def secrets_dir(binding: Binding) -> Path:
    return Path(binding.work_dir) / SECRETS_DIR


def deliver(
    values: list[SecretValue], env: dict[str, str], binding: Binding, owner: Any = None
) -> None:
    """Put each value where the job reads it: ``env`` (in place), or a 0600 file of ``owner``
    (a ``jobuser`` user, None for the runner's own) whose path goes in ``<NAME>_FILE``."""
    files = [v for v in values if v.mount is Mount.FILE]
    for value in values:
        if value.mount is Mount.ENV:
            env[value.name] = value.value
    if not files:
        return
    folder = secrets_dir(binding)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    for value in files:
        path = folder / value.name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value.value)
        if owner is not None:
            os.chown(path, owner.uid, owner.gid)
        env[value.name + FILE_SUFFIX] = str(path)
    if owner is not None:
        os.chown(folder, owner.uid, owner.gid)


def remove_files(binding: Binding) -> None:
    shutil.rmtree(secrets_dir(binding), ignore_errors=True)


def hide_in_argv(argv: list[str], names: set[str]) -> tuple[list[str], dict[str, str]]:
    """podman's ``-e NAME=VALUE`` of each secret becomes ``-e NAME`` (podman takes the value
    from its own environment): (the new argv, the environment entries podman needs)."""
    out: list[str] = []
    moved: dict[str, str] = {}
    for i, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        if i > 0 and argv[i - 1] == "-e" and sep and name in names:
            moved[name] = value
            out.append(name)
        else:
            out.append(arg)
    return out, moved


class Masker:
    """Streams text through, each value replaced by ``***``, holding back a possible prefix."""

    def __init__(self, values: list[str]) -> None:
        encoded = {v.encode() for v in values if len(v.encode()) >= MIN_MASKED_BYTES}
        self.values = sorted(encoded, key=len, reverse=True)  # longest first: no partial masks
        self.pending = b""

    def _held(self, data: bytes) -> int:
        """Length of the longest end of ``data`` that begins some value (but is not all of it)."""
        longest = 0
        for value in self.values:
            for n in range(min(len(value) - 1, len(data)), longest, -1):
                if data.endswith(value[:n]):
                    longest = n
                    break
        return longest

    def _mask(self, data: bytes) -> bytes:
        for value in self.values:
            data = data.replace(value, MASK)
        return data

    def feed(self, chunk: bytes) -> bytes:
        """What may be written now; a possible start of a value waits for the next chunk."""
        data = self._mask(self.pending + chunk)
        keep = self._held(data)
        self.pending = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        data, self.pending = self._mask(self.pending), b""
        return data


def pump(source: IO[bytes], sink: IO[bytes], masker: Masker) -> threading.Thread:
    """Copy ``source`` (the job's output pipe) into ``sink`` (the log) through ``masker``."""

    def copy() -> None:
        fd = source.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            sink.write(masker.feed(chunk))
            sink.flush()
        sink.write(masker.flush())
        sink.flush()
        source.close()

    thread = threading.Thread(target=copy, name="starforge-log-mask", daemon=True)
    thread.start()
    return thread

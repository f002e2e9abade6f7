"""A raw HTTP client that sends what an attacker would: headers, then a body pushed as fast as
the server takes it, while the answer is read. httpx would first write the whole body."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

CHUNK = 64 * 1024


@dataclass
class Answer:
    status: int
    body: bytes
    seconds: float  # from the last header byte sent to the whole answer read
    sent: int  # body bytes the server's socket took before the answer (or the close)


def post(
    url: str,
    path: str,
    *,
    total: int,
    headers: dict[str, str] | None = None,
    chunked: bool = False,
) -> Answer:
    """POST ``total`` bytes of junk to ``path``; return the answer and how much got through."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=30)
    lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    sent = 0

    def push() -> None:
        nonlocal sent
        block = b"x" * CHUNK
        frame = b"%x\r\n" % CHUNK + block + b"\r\n" if chunked else block
        try:
            while sent < total:
                sock.sendall(frame)
                sent += CHUNK
        except OSError:
            return  # the server answered and closed, or we did

    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    began = time.perf_counter()
    pusher = threading.Thread(target=push, daemon=True)
    pusher.start()
    try:
        status, body = _read_answer(sock)
        seconds = time.perf_counter() - began
        taken = sent
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        pusher.join(timeout=30)
    return Answer(status=status, body=body, seconds=seconds, sent=taken)


def _read_answer(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        more = sock.recv(65536)
        if not more:
            break
        rest += more
    return status, rest[:length]

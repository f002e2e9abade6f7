"""SQLite's writers in one process: they queue on the engine's gate and every one commits; a
transaction that fails, or a connection dropped inside one, never leaves the gate shut."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from starforge.server.db.engine import BUSY_TIMEOUT_MS, make_engine, read_only

pytestmark = pytest.mark.sqlite
# Bounds a failure, asserts no duration: a gate left shut holds each later writer for the busy
# timeout (30 s) before it goes on without it, so a leak fails here instead of only slowing.
JOIN_LIMIT_S = BUSY_TIMEOUT_MS / 1000 * 2 / 3


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    made = make_engine(f"sqlite:///{tmp_path / 'writers.db'}")
    with made.begin() as conn:
        conn.execute(text("CREATE TABLE t (writer INTEGER, n INTEGER)"))
    return made


def count(engine: Engine) -> int:
    with read_only(engine) as conn:
        return int(conn.execute(text("SELECT count(*) FROM t")).scalar_one())


def run_threads(target: object, n: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]  # type: ignore[arg-type]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_LIMIT_S)
        assert not t.is_alive(), "a writer never got through the gate"


def test_concurrent_read_then_write_transactions_all_commit(engine: Engine) -> None:
    def writer(i: int) -> None:
        for _ in range(25):
            with engine.begin() as conn:  # read, then write: the upgrade that fails unqueued
                seen = conn.execute(text("SELECT count(*) FROM t")).scalar_one()
                conn.execute(text("INSERT INTO t VALUES (:w, :n)"), {"w": i, "n": seen})

    run_threads(writer, 8)
    assert count(engine) == 200


def test_a_failed_write_transaction_lets_the_next_writer_through(engine: Engine) -> None:
    with pytest.raises(ValueError), engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (0, 0)"))
        raise ValueError("the request failed after writing")

    def writer(i: int) -> None:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (:w, 1)"), {"w": i})

    run_threads(writer, 2)
    assert count(engine) == 2  # the failed one rolled back, both later ones committed


def test_a_connection_dropped_inside_a_write_lets_the_next_writer_through(engine: Engine) -> None:
    conn = engine.connect()
    conn.begin()
    conn.execute(text("INSERT INTO t VALUES (0, 0)"))
    conn.invalidate()  # the connection is gone without a commit or a rollback
    conn.close()

    def writer(i: int) -> None:
        with engine.begin() as c:
            c.execute(text("INSERT INTO t VALUES (:w, 1)"), {"w": i})

    run_threads(writer, 2)
    assert count(engine) == 2


def test_a_reader_is_not_held_back_by_an_open_write_transaction(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (0, 0)"))
        seen: list[int] = []
        reader = threading.Thread(target=lambda: seen.append(count(engine)))
        reader.start()
        reader.join(JOIN_LIMIT_S)
        assert not reader.is_alive() and seen == [0]  # the snapshot before the commit
    assert count(engine) == 1

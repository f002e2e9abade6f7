"""The schema comes from Alembic and matches the ORM models; upgrades keep the data.

Each test runs on a SQLite file and, when the suite runs on PostgreSQL, on an empty PostgreSQL
database as well: the same migrations must build the same schema on both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, insert, text

from starforge.contract.states import NodeState
from starforge.server.db.engine import (
    SchemaNewerThanCode,
    alembic_config,
    make_engine,
    make_sessions,
    migrate,
)
from starforge.server.db.labops import UsageSummary
from starforge.server.db.metrics import RunMeta
from starforge.server.db.models import Attempt, Event, Run
from starforge.server.db.resources import QuotaRow
from starforge.server.db.tables import Base
from tests.postgres.databases import Databases, require_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Databases]:
    """PostgreSQL, whichever database the rest of the suite runs on (see tests/postgres)."""
    made = Databases(require_cluster())
    yield made
    made.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a database with no tables at all."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'db' / 'x.db'}")
        yield engine
        engine.dispose()
        return
    cluster: Databases = request.getfixturevalue("cluster")
    url = cluster.empty()
    engine = make_engine(url)
    yield engine
    engine.dispose()
    cluster.drop(url)


def test_every_migration_in_turn_builds_the_schema_of_the_models(empty_engine: Engine) -> None:
    engine = empty_engine
    command.upgrade(alembic_config(engine), "head")  # the path an existing database takes
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_an_empty_database_is_created_at_the_head_revision_and_later_upgrades_from_there(
    empty_engine: Engine,
) -> None:
    engine = empty_engine
    migrate(engine)  # empty: created from the models and stamped
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
        assert (
            context.get_current_revision()
            == ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
        )


def test_migrating_twice_changes_nothing(empty_engine: Engine) -> None:
    engine = empty_engine
    migrate(engine)
    migrate(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            (ScriptDirectory.from_config(alembic_config(engine)).get_current_head(),)
        ]


@pytest.mark.sqlite
def test_a_sqlite_database_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    migrate(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    engine.dispose()


def test_a_database_migrated_by_a_newer_starforge_is_refused_and_left_as_it_is(
    empty_engine: Engine,
) -> None:
    engine = empty_engine
    migrate(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    with pytest.raises(SchemaNewerThanCode, match="0099_from_the_future") as caught:
        migrate(engine)
    assert "newer version" in str(caught.value)
    with engine.connect() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert version == "0099_from_the_future"


SPEC = {"project": "proj", "experiment": "exp", "profiles": ["h200:8"], "nested": {"a": [1, 2]}}
MANIFEST = {"files": [{"path": "experiments/exp/run.sh", "sha256": "ab" * 32, "size": 3}]}
POOLS = [{"name": "h200", "series": "h200", "nodes": 1, "gpus_per_node": 8, "profile": "h200"}]
ALLOCATION = [{"rank": 0, "pool": "h200", "pool_rank": 0, "node": "h200-1", "gpus": [0, 1]}]
NODES = {"0": {"node": "h200-1", "pool": "h200", "ref": "local:7", "state": "running", "beat": 1.5}}


def _rows_at_0005(engine: Engine) -> None:
    """Rows as a 0005 server wrote them: JSON as text, NULL for 'every profile'."""
    t = json.dumps
    at = "'2025-01-01 00:00:00'"
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (name, token_sha256, created_at, role) "
                f"VALUES ('alice', 'x', {at}, 'user')"
            )
        )
        conn.execute(
            text(
                'INSERT INTO runs (id, "user", project, experiment, method, status, reason, '
                "priority, spec_json, manifest_json, pools_json, gpus, idempotency_key, "
                "current_attempt, created_at, updated_at, auto_retries) VALUES ('r-1', 'alice', "
                "'proj', 'exp', 'custom/custom', 'running', '', 0, :spec, :manifest, :pools, 8, "
                f"'k', 1, {at}, {at}, 0)"
            ),
            {"spec": t(SPEC), "manifest": t(MANIFEST), "pools": t(POOLS)},
        )
        conn.execute(
            text(
                "INSERT INTO attempts (run_id, number, allocation_json, nodes_json, log_path) "
                "VALUES ('r-1', 1, :allocation, :nodes, 'logs/attempt-1.log')"
            ),
            {"allocation": t(ALLOCATION), "nodes": t(NODES)},
        )
        conn.execute(
            text(
                "INSERT INTO events (run_id, at, src, dst, reason, actor) "
                f"VALUES ('r-1', {at}, NULL, 'queued', 'submitted', 'alice')"
            )
        )
        conn.execute(
            text(
                'INSERT INTO quotas ("user", max_gpus, max_gpus_per_series_json, max_runs, '
                "allowed_profiles_json, priority, updated_at, updated_by) VALUES "
                f"('alice', 16, :a_series, NULL, NULL, 1, {at}, 'root'), "
                f"('bob', NULL, '{{}}', 2, :b_profiles, 0, {at}, 'root')"
            ),
            {"a_series": t({"h200": 8}), "b_profiles": t(["h100"])},
        )
        conn.execute(
            text(
                "INSERT INTO run_meta (run_id, hparams_json, meta_json, last_step, updated_at) "
                f"VALUES ('r-1', :hparams, :meta, 4, {at})"
            ),
            {"hparams": t({"lr": 0.1}), "meta": t({"sdk": "x"})},
        )


def test_an_upgrade_from_0005_turns_json_text_into_the_same_json_values(
    empty_engine: Engine,
) -> None:
    engine = empty_engine
    command.upgrade(alembic_config(engine), "0005_merge")
    _rows_at_0005(engine)
    migrate(engine)
    with make_sessions(engine)() as session:
        run = session.get(Run, "r-1")
        assert run is not None
        assert (run.spec, run.manifest, run.pools) == (SPEC, MANIFEST, POOLS)
        (attempt,) = run.attempts  # the parent table was copied: its children are still there
        assert attempt.allocation == ALLOCATION and attempt.nodes == NODES
        assert attempt.node_records()[0].state is NodeState.RUNNING
        assert [e.reason for e in session.query(Event)] == ["submitted"]
        quotas = {q.user: q for q in session.query(QuotaRow)}
        assert (quotas["alice"].max_gpus_per_series, quotas["alice"].allowed_profiles) == (
            {"h200": 8},
            None,
        )
        assert quotas["bob"].allowed_profiles == ["h100"]
        meta = session.get(RunMeta, "r-1")
        assert meta is not None and (meta.hparams, meta.meta) == ({"lr": 0.1}, {"sdk": "x"})
    with engine.connect() as conn:  # a NULL stays SQL NULL, not the JSON text 'null'
        nulls = "SELECT count(*) FROM quotas WHERE allowed_profiles IS NULL"
        assert conn.exec_driver_sql(nulls).scalar() == 1
        if engine.dialect.name == "sqlite":  # turned off while migrating, on again after
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_an_upgrade_to_0029_sums_the_attempts_that_ended_into_the_usage_summaries(
    empty_engine: Engine,
) -> None:
    engine = empty_engine
    command.upgrade(alembic_config(engine), "0028_reruns")
    day = datetime(2025, 3, 1, tzinfo=UTC)
    run = {
        "project": "proj",
        "experiment": "exp",
        "method": "custom/custom",
        "spec": SPEC,
        "manifest": MANIFEST,
        "pools": POOLS,
        "created_at": day,
        "updated_at": day,
    }
    slot = {"rank": 0, "pool_rank": 0, "node": "h200-1"}
    with engine.begin() as conn:
        conn.execute(
            insert(Run.__table__),
            [
                {**run, "id": "r-1", "user": "alice", "status": "running", "idempotency_key": "1"},
                {**run, "id": "r-2", "user": "bob", "status": "failed", "idempotency_key": "2"},
            ],
        )
        conn.execute(
            insert(Attempt.__table__),
            [  # 2 GPUs from 22:30 to 01:00, then again (still running: not summarized)
                {
                    "run_id": "r-1",
                    "number": 1,
                    "allocation": [{**slot, "pool": "h200", "gpus": [0, 1]}],
                    "started_at": day + timedelta(hours=22.5),
                    "ended_at": day + timedelta(hours=25),
                },
                {
                    "run_id": "r-1",
                    "number": 2,
                    "allocation": [{**slot, "pool": "h200", "gpus": [0, 1]}],
                    "started_at": day + timedelta(hours=26),
                    "ended_at": None,
                },
                # 4 GPUs of a pool the run does not name, for half an hour; then one never started
                {
                    "run_id": "r-2",
                    "number": 1,
                    "allocation": [{**slot, "pool": "gone", "gpus": [0, 1, 2, 3]}],
                    "started_at": day + timedelta(hours=30),
                    "ended_at": day + timedelta(hours=30.5),
                },
                {
                    "run_id": "r-2",
                    "number": 2,
                    "allocation": [],
                    "started_at": None,
                    "ended_at": day + timedelta(hours=31),
                },
            ],
        )
    migrate(engine)
    with make_sessions(engine)() as session:
        found = {
            (s.day, s.user, s.project, s.series): s.gpu_hours for s in session.query(UsageSummary)
        }
    assert found == {
        (date(2025, 3, 1), "alice", "proj", "h200"): pytest.approx(3.0),
        (date(2025, 3, 2), "alice", "proj", "h200"): pytest.approx(2.0),
        (date(2025, 3, 2), "bob", "proj", "?"): pytest.approx(2.0),
    }

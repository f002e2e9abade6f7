"""The schema comes from Alembic and matches the ORM models; upgrades keep the data."""

from __future__ import annotations

import json
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from starforge.contract.states import NodeState
from starforge.server.db.engine import alembic_config, make_engine, make_sessions, migrate
from starforge.server.db.metrics import RunMeta
from starforge.server.db.models import Event, Run
from starforge.server.db.resources import QuotaRow
from starforge.server.db.tables import Base


def test_every_migration_in_turn_builds_the_schema_of_the_models(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db' / 'x.db'}")
    command.upgrade(alembic_config(engine), "head")  # the path an existing database takes
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


def test_an_empty_database_is_created_at_the_head_revision_and_later_upgrades_from_there(
    tmp_path: Path,
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    migrate(engine)  # empty: created from the models and stamped
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
        assert (
            context.get_current_revision()
            == ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
        )
    engine.dispose()


def test_migrating_twice_changes_nothing(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    migrate(engine)
    migrate(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            (ScriptDirectory.from_config(alembic_config(engine)).get_current_head(),)
        ]
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    engine.dispose()


SPEC = {"project": "proj", "experiment": "exp", "profiles": ["h200:8"], "nested": {"a": [1, 2]}}
MANIFEST = {"files": [{"path": "experiments/exp/run.sh", "sha256": "ab" * 32, "size": 3}]}
POOLS = [{"name": "h200", "series": "h200", "nodes": 1, "gpus_per_node": 8, "profile": "h200"}]
ALLOCATION = [{"rank": 0, "pool": "h200", "pool_rank": 0, "node": "h200-1", "gpus": [0, 1]}]
NODES = {"0": {"node": "h200-1", "pool": "h200", "ref": "local:7", "state": "running", "beat": 1.5}}


def _rows_at_0005(engine: Engine) -> None:
    """Rows as a 0005 server wrote them: JSON as text, NULL for 'every profile'."""
    text = json.dumps
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO users (name, token_sha256, created_at, role) "
            "VALUES ('alice', 'x', '2025-01-01 00:00:00', 'user')"
        )
        conn.exec_driver_sql(
            "INSERT INTO runs (id, user, project, experiment, method, status, reason, priority, "
            "spec_json, manifest_json, pools_json, gpus, idempotency_key, current_attempt, "
            "created_at, updated_at, auto_retries) VALUES ('r-1', 'alice', 'proj', 'exp', "
            "'custom/custom', 'running', '', 0, ?, ?, ?, 8, 'k', 1, '2025-01-01 00:00:00', "
            "'2025-01-01 00:00:00', 0)",
            (text(SPEC), text(MANIFEST), text(POOLS)),
        )
        conn.exec_driver_sql(
            "INSERT INTO attempts (run_id, number, allocation_json, nodes_json, log_path) "
            "VALUES ('r-1', 1, ?, ?, 'logs/attempt-1.log')",
            (text(ALLOCATION), text(NODES)),
        )
        conn.exec_driver_sql(
            "INSERT INTO events (run_id, at, src, dst, reason, actor) "
            "VALUES ('r-1', '2025-01-01 00:00:00', NULL, 'queued', 'submitted', 'alice')"
        )
        conn.exec_driver_sql(
            "INSERT INTO quotas (user, max_gpus, max_gpus_per_series_json, max_runs, "
            "allowed_profiles_json, priority, updated_at, updated_by) VALUES "
            "('alice', 16, '{\"h200\": 8}', NULL, NULL, 1, '2025-01-01 00:00:00', 'root'), "
            "('bob', NULL, '{}', 2, '[\"h100\"]', 0, '2025-01-01 00:00:00', 'root')"
        )
        conn.exec_driver_sql(
            "INSERT INTO run_meta (run_id, hparams_json, meta_json, last_step, updated_at) "
            "VALUES ('r-1', '{\"lr\": 0.1}', '{\"sdk\": \"x\"}', 4, '2025-01-01 00:00:00')"
        )


def test_an_upgrade_from_0005_turns_json_text_into_the_same_json_values(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
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
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()

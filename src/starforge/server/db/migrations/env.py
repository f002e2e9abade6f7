"""Alembic environment: runs migrations on the engine the server hands over (online mode only)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from starforge.server.db.models import Base

config = context.config
target_metadata = Base.metadata


def _sqlite_foreign_keys(connection: Connection, on: bool) -> None:
    # Outside any transaction (SQLite ignores this pragma inside one), on the driver's connection.
    connection.connection.driver_connection.execute(  # type: ignore[union-attr]
        f"PRAGMA foreign_keys={'ON' if on else 'OFF'}"
    )


def run_migrations_online() -> None:
    engine = config.attributes.get("engine")
    if engine is None:
        engine = create_engine(str(config.get_main_option("sqlalchemy.url")))
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        # SQLite cannot ALTER most things in place; batch mode copies the table instead, and
        # dropping the old copy of a parent table (``runs``) would cascade into its children
        # unless foreign keys are off while the migrations run.
        if sqlite:
            _sqlite_foreign_keys(connection, False)
        try:
            context.configure(
                connection=connection, target_metadata=target_metadata, render_as_batch=sqlite
            )
            with context.begin_transaction():
                context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").first()
                connection.rollback()
                if broken is not None:
                    raise RuntimeError(f"a migration left rows that break a foreign key: {broken}")
        finally:
            if sqlite:
                if connection.in_transaction():
                    connection.rollback()
                _sqlite_foreign_keys(connection, True)


if context.is_offline_mode():
    raise RuntimeError("StarForge runs its migrations online only")
run_migrations_online()

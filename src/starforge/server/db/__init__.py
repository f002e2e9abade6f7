"""Persistence: SQLAlchemy 2 ORM models, the engine/session factory and Alembic migrations."""

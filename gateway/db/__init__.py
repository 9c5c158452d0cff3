"""The gateway's database: SQLAlchemy 2 async models, engine and Alembic migrations."""

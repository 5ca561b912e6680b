"""Alembic environment: runs migrations on the connection dagline hands it (see `engine.upgrade`)."""

from alembic import context

from dagline.db.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - dagline always passes its connection
    raise RuntimeError("run migrations through `dagline db upgrade`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

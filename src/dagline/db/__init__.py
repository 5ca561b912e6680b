"""The database layer: schema (`models`), connections (`engine`), state changes (`transitions`),
row-lock claims (`claims`) and Alembic migrations. Same schema on SQLite and PostgreSQL."""

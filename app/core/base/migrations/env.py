"""Alembic environment: runs migrations on the connection the store hands over (or a URL)."""
from alembic import context
from sqlalchemy import create_engine

from app.core.base.schema import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    connection = create_engine(config.get_main_option("sqlalchemy.url")).connect()
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

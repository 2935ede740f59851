"""The declarative base, the one clock of stored times (`clock.utcnow`), and the app's key/value settings table."""
from __future__ import annotations

from sqlalchemy import String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.core.base.clock import utcnow  # noqa: F401 - the stored times' clock, for the schema's users


class Base(DeclarativeBase):
    pass


class Setting(Base):
    """An app setting (queue paused, concurrent jobs …) as JSON text."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(60), primary_key=True)
    value: Mapped[str] = mapped_column(Text)

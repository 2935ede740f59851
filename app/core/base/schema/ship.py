"""Exports and deployments of the served model."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class ExportRow(Base):
    """A GGUF export of a checkpoint (or of the base model: checkpoint_id null): its folder, files with their smoke
    tests (files_json), the LoRA GGUF, and the embedded template's hash, stop strings and tokens (meta_json)."""

    __tablename__ = "exports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True, index=True)
    base_model: Mapped[str] = mapped_column(Text)
    label: Mapped[str] = mapped_column(Text)
    key: Mapped[str] = mapped_column(String(64), index=True)
    path: Mapped[str] = mapped_column(Text)
    files_json: Mapped[str] = mapped_column(Text, default="[]")
    lora_file: Mapped[str | None] = mapped_column(Text, nullable=True)
    template_sha256: Mapped[str] = mapped_column(String(64), default="")
    meta_json: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Deployment(Base):
    """One change of what the built-in server serves: deploy (an export's file) or rollback (to the file the current
    deployment replaced). The newest row is what serves."""

    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    export_id: Mapped[int] = mapped_column(ForeignKey("exports.id"))
    file: Mapped[str] = mapped_column(Text)
    quant: Mapped[str] = mapped_column(String(20))
    sha256: Mapped[str] = mapped_column(String(64))
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True)
    base_model: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(20))  # deploy | rollback
    replaces_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

"""ORM tables (SQLAlchemy 2.x), one module per concern; every table is importable from here. Alembic migrations under
migrations/ are the source of truth for the schema."""
from __future__ import annotations

from app.core.base.schema.base import Base, Setting, utcnow
from app.core.base.schema.blind import BlindTestRow, BlindTrialRow
from app.core.base.schema.capture import (AgentSession, CaptureCount, CaptureFile, DatasetFile, ImportRow, MessageRow,
                                          QuarantineRow, SessionCount, ToolCount)
from app.core.base.schema.datasets import BuiltDataset, DatasetSession, HeldOut
from app.core.base.schema.experience import CorrectionRow, ExperienceRow, RequestKey, TeacherCallRow
from app.core.base.schema.jobs import CheckpointRow, Job, Run
from app.core.base.schema.judge import EvalRow, Promotion, VerdictRow
from app.core.base.schema.school import CycleRow, SessionMark
from app.core.base.schema.ship import Deployment, ExportRow
from app.core.base.schema.team import TeamMember  # noqa: F401

__all__ = [
    "AgentSession", "Base", "BlindTestRow", "BlindTrialRow", "BuiltDataset", "CaptureCount", "CaptureFile",
    "CheckpointRow", "CorrectionRow", "CycleRow",
    "DatasetFile", "DatasetSession", "Deployment", "EvalRow", "ExperienceRow", "ExportRow", "HeldOut",
    "ImportRow", "Job", "MessageRow", "Promotion", "QuarantineRow", "RequestKey", "Run", "SessionCount", "SessionMark",
    "Setting", "TeacherCallRow", "ToolCount", "VerdictRow", "utcnow",
]

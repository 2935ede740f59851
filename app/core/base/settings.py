"""App settings in the store's `settings` table: one JSON value per key."""
from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.core.base.errors import Explained
from app.core.base.schema import Setting
from app.core.base.store import Store


def get(store: Store, key: str, default: Any = None) -> Any:
    with store.session() as s:
        row = s.get(Setting, key)
        return json.loads(row.value) if row else default


def put(store: Store, key: str, value: Any) -> None:
    stmt = sqlite_insert(Setting).values(key=key, value=json.dumps(value))
    with store.session() as s:
        s.execute(stmt.on_conflict_do_update(index_elements=[Setting.key], set_={"value": stmt.excluded.value}))


M = TypeVar("M", bound=BaseModel)
TRUE_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


class SettingError(Explained, ValueError):
    """A settings value that cannot be used; names the key and the values it accepts."""


def load_model(store: Store, key: str, model: type[M]) -> M:
    """The settings stored under key as model; the defaults when absent or when a hand-edited row no longer
    validates."""
    try:
        return model.model_validate(get(store, key, {}) or {})
    except ValidationError:
        return model()


def accepted(model: type[BaseModel], field: str, words: dict[str, str] | None = None) -> str:
    """What a field accepts, in words (words: hand-written descriptions for fields a type cannot explain)."""
    if words and field in words:
        return words[field]
    info = model.model_fields[field]
    args = getattr(info.annotation, "__args__", None)
    if args and all(isinstance(a, str) for a in args):
        return " | ".join(args)
    kind = {int: "a whole number", float: "a number", bool: "true | false", str: "text"}.get(info.annotation, "text")
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    bounds = [f"{sign} {getattr(m, op)}" for m in info.metadata for op, sign in signs.items()
              if getattr(m, op, None) is not None]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def set_field(store: Store, key: str, model: type[M], field: str, raw: Any, error: type[SettingError] = SettingError,
              words: dict[str, str] | None = None) -> M:
    """Change one field of the settings under key (raw may be text from a command line); a bad field or value is
    refused with what is accepted."""
    if field not in model.model_fields:
        raise error(f"there is no {key} setting {field!r}", fix=f"use one of: {', '.join(model.model_fields)}")
    if isinstance(raw, str) and model.model_fields[field].annotation is bool:
        raw = TRUE_WORDS.get(raw.strip().lower(), raw)
    try:
        value = model.model_validate({**load_model(store, key, model).model_dump(), field: raw})
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        raise error(f"{field} cannot be {raw!r}", why=why,
                    fix=f"{field} accepts {accepted(model, field, words)}") from None
    put(store, key, value.model_dump())
    return value

"""App settings in the store's `settings` table: one JSON value per key."""
from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.core.base.errors import Explained
from app.core.base.schema import Setting
from app.core.base.store import Store


def get(store: Store, key: str, default: Any = None) -> Any:
    with store.session() as s:
        row = s.get(Setting, key)
        return json.loads(row.value) if row else default


def put(store: Store, key: str, value: Any) -> None:
    stmt = store.insert(Setting).values(key=key, value=json.dumps(value))
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


BOUNDS = {"greater_than_equal": ("ge", "{} or more"), "greater_than": ("gt", "more than {}"),
          "less_than_equal": ("le", "{} or less"), "less_than": ("lt", "less than {}")}
KINDS = {"int": "a whole number", "float": "a number", "bool": "true or false", "string": "text",
         "dict": "a JSON object", "list": "a list", "literal": "one of {expected}"}


def plain_reason(exc: ValidationError, rules: bool = True) -> str:
    """Why pydantic refused a value, in our words instead of pydantic's ("Value error, …", "Input should be …"): a
    validator's own sentence as it is, a bound or type as "learning_rate must be 0 or more". rules=False leaves out
    what a bound or type says (the caller says what is accepted anyway) and keeps the validators' reasons."""
    err = exc.errors()[0]
    kind, ctx = err["type"], err.get("ctx") or {}
    where = ".".join(str(p) for p in err["loc"])
    found = ctx.get("error")
    if kind == "value_error" and isinstance(found, ValidationError):
        inner = plain_reason(found)  # a validator that validated a model of its own (the policy's hyper)
        return f"{where}: {inner}" if where and not inner.startswith(where) else inner
    if kind in ("value_error", "assertion_error"):
        return str(found or err["msg"])
    if not rules:
        return ""
    subject = where or "the value"
    if kind in BOUNDS:
        name, words = BOUNDS[kind]
        return f"{subject} must be {words.format(ctx.get(name))}"
    if kind == "extra_forbidden":
        return f"{where!r} is not one of its names" if where else "it has a name that is not known"
    if kind == "missing":
        return f"{subject} is missing"
    prefix = kind.split("_", 1)[0]
    if prefix in KINDS:
        return f"{subject} must be {KINDS[prefix].format(expected=ctx.get('expected', ''))}"
    return f"{subject}: {err['msg'][0].lower()}{err['msg'][1:]}"


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
        why = plain_reason(exc, rules=False)  # a bound or a type is said once, by the fix
        raise error(f"{field} cannot be {raw!r}", why=why,
                    fix=f"{field} accepts {accepted(model, field, words)}") from None
    put(store, key, value.model_dump())
    return value

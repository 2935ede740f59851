"""App settings in the store's `settings` table: one JSON value per key."""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy.dialects.sqlite import insert as sqlite_insert

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

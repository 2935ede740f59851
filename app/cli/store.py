"""`nightschool store where | migrate --to URL`: which database the store is, and moving a solo store to PostgreSQL."""
from __future__ import annotations

import argparse
import sys


def cmd_where(args: argparse.Namespace) -> int:
    from app.core.base.store import URL_ENV, Store, database_url

    store = Store()
    try:
        print(f"{store.dialect}: {_shown(store)}" + ("" if database_url() else f" (the data dir's file; {URL_ENV} "
                                                                               "names a PostgreSQL store instead)"))
    finally:
        store.close()
    return 0


def _shown(store) -> str:
    from sqlalchemy.engine import make_url

    return store.where if store.path is not None else make_url(store.url).render_as_string(hide_password=True)


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.core.base.errors import Explained
    from app.core.base.store import URL_ENV, URL_FILE, Store
    from app.core.base.transfer import move

    try:
        source = Store(args.source) if args.source else Store()
        target = Store(args.to)
    except Explained as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if source.url == target.url:
        print("error: the source and the target are the same store. Name another database with --to.",
              file=sys.stderr)
        return 2
    print(f"moving {_shown(source)} ({source.dialect}) to {_shown(target)} ({target.dialect})", flush=True)
    try:
        moved = move(source, target, say=lambda line: print(f"  {line}", flush=True))
    except Explained as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        source.close()
        target.close()
    width = max(len(t.table) for t in moved.tables)
    print(f"\n{'table':<{width}}  {'source':>8}  {'target':>8}  sampled  ")
    for t in moved.tables:
        mark = "ok" if t.ok else "DIFFERS" + (f" ({'; '.join(t.differing[:3])})" if t.differing else "")
        print(f"{t.table:<{width}}  {t.source:>8}  {t.target:>8}  {t.sampled:>7}  {mark}")
    if not moved.ok:
        bad = [t.table for t in moved.tables if not t.ok]
        print(f"\nerror: the copy differs from the source in {', '.join(bad)}. The target holds a partial or altered "
              "copy: drop its tables and report this output; keep using the source, which is unchanged.",
              file=sys.stderr)
        return 1
    print(f"\nall {len(moved.tables)} tables copied: {moved.rows} rows, every count equal and every sampled row "
          f"the same.\nUse it: export {URL_ENV}='{args.to}' (or write the URL to the config dir's {URL_FILE} "
          "file). The source is left as it was.")
    return 0


def register(sub) -> None:
    store = sub.add_parser("store", help="the database: which one, and moving a solo store to PostgreSQL")
    ssub = store.add_subparsers(title="store commands", required=True)
    where = ssub.add_parser("where", help="which database the store is (SQLite file or PostgreSQL URL)")
    where.set_defaults(func=cmd_where)
    migrate = ssub.add_parser("migrate", help="copy every table of this store into an empty database, then compare "
                                              "each table's count and a sample of its rows")
    migrate.add_argument("--to", required=True, metavar="URL",
                         help="the target: postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE (an empty database)")
    migrate.add_argument("--from", dest="source", metavar="FILE_OR_URL",
                         help="the source (default: the store in use: the data dir's nightschool.db)")
    migrate.set_defaults(func=cmd_migrate)

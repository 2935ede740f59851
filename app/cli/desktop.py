"""`nightschool desktop install | uninstall | status`: the applications-menu launcher, its icons, the *.jsonl MIME type
and (asked for) the login entry that starts Nightschool in the tray."""
from __future__ import annotations

from pathlib import Path

from app.cli.common import print_json, refusals


def _prefix(args) -> Path | None:
    return Path(args.prefix).expanduser().absolute() if args.prefix else None


def _say_caches(refreshed: list[str], skipped: list[str]) -> None:
    for command in refreshed:
        print(f"refreshed: {command}")
    for why in skipped:
        print(f"note: {why}")


def cmd_install(args) -> int:
    from app.core.desktop import install

    def run() -> int:
        report = install(args.exec, prefix=_prefix(args), autostart=args.autostart, refresh=not args.no_refresh)
        if args.json:
            return print_json(report.to_dict())
        print(f"wrote {len(report.written)} files (Exec={report.exec} gui %F):")
        for path in report.written:
            print(f"  {path}")
        _say_caches(report.refreshed, report.skipped)
        if report.autostart:
            print(f"at login Nightschool starts in the tray ({report.autostart})")
        if report.live:
            print("Nightschool is in the applications menu; *.jsonl files open with it. "
                  "Remove: nightschool desktop uninstall" + (f" --prefix {args.prefix}" if args.prefix else ""))
        else:
            print(f"staged under {report.prefix}: the desktop sees the files once they are installed where it reads "
                  "($XDG_DATA_HOME, $XDG_DATA_DIRS)")
        return 0

    return refusals(run)


def cmd_uninstall(args) -> int:
    from app.core.desktop import uninstall

    def run() -> int:
        report = uninstall(prefix=_prefix(args), refresh=not args.no_refresh)
        if args.json:
            return print_json(report.to_dict())
        if not report.removed:
            print(f"no Nightschool desktop files under {report.prefix} or in autostart: nothing to remove")
            return 0
        print(f"removed {len(report.removed)} files:")
        for path in report.removed:
            print(f"  {path}")
        _say_caches(report.refreshed, report.skipped)
        return 0

    return refusals(run)


def cmd_status(args) -> int:
    from app.core.desktop import status

    def run() -> int:
        st = status(prefix=_prefix(args))
        if args.json:
            return print_json(st.to_dict())
        if not st.present:
            print(f"not installed under {st.prefix}. Add it: nightschool desktop install [--autostart]")
        else:
            print(f"launcher: {st.prefix / 'applications' / 'nightschool.desktop'}"
                  + (f" (Exec={st.exec})" if st.launcher else " — missing"))
            for path in st.missing:
                print(f"  missing: {path} (nightschool desktop install writes it again)")
        print(f"at login: {st.autostart}" if st.autostart else "at login: not started (install --autostart)")
        return 0

    return refusals(run)


def register(sub) -> None:
    """Add `desktop …` to the main parser's subcommands."""
    dp = sub.add_parser("desktop", help="the applications-menu launcher, icons, *.jsonl type: install, uninstall, "
                                        "status")
    dp.set_defaults(func=cmd_status, json=False, prefix=None)
    ds = dp.add_subparsers(title="desktop commands")
    ins = ds.add_parser("install", help="add the launcher, icons and the *.jsonl MIME type ($XDG_DATA_HOME)")
    ins.add_argument("--autostart", action="store_true", help="also start Nightschool in the tray at login")
    ins.add_argument("--prefix", help="the data folder to write under (default $XDG_DATA_HOME or ~/.local/share; "
                                      "a staging root such as pkg/usr/share works)")
    ins.add_argument("--exec", help="the nightschool program the launcher runs (default: this one)")
    ins.add_argument("--no-refresh", action="store_true",
                     help="do not run update-desktop-database, update-mime-database, gtk-update-icon-cache")
    ins.add_argument("--json", action="store_true", help="print the report as JSON, nothing else")
    ins.set_defaults(func=cmd_install)
    uni = ds.add_parser("uninstall", help="remove the files install writes (and the login entry)")
    uni.add_argument("--prefix", help="the data folder install wrote under")
    uni.add_argument("--no-refresh", action="store_true", help="do not refresh the desktop's caches")
    uni.add_argument("--json", action="store_true", help="print the report as JSON, nothing else")
    uni.set_defaults(func=cmd_uninstall)
    st = ds.add_parser("status", help="which of the desktop files are there, and the launcher's command")
    st.add_argument("--prefix", help="the data folder to look under")
    st.add_argument("--json", action="store_true", help="print the status as JSON, nothing else")
    st.set_defaults(func=cmd_status)

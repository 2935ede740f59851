"""`nightschool daemon [run] | status | stop | install | uninstall`: the runtime (capture, queue, model-server keeper,
cycles) in the foreground without a window, systemd-ready (notify + watchdog), and a systemd user unit for it."""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path

from app.cli.common import open_store, print_json
from app.core.base import paths
from app.core.capture.agents import home_vars
from app.core.runtime.machinery.bus import Kind

log = logging.getLogger("nightschool.daemon")
LOG_BYTES, LOG_KEEP = 5_000_000, 3
UNIT = "nightschool.service"
STOP_TIMEOUT_S = 90.0
PASSED_ENV = ("NIGHTSCHOOL_HOME", "NIGHTSCHOOL_ENGINE_PYTHON", "NIGHTSCHOOL_GPUS", "NIGHTSCHOOL_ACCELERATE_CONFIG",
              *home_vars())  # what decides the data dir, the engine and the capture roots


def log_path() -> Path:
    return paths.data_dir() / "logs" / "daemon.log"


def setup_logging() -> Path:
    """Python logging to <data dir>/logs/daemon.log (rotating) and to stderr (the journal, under systemd)."""
    path = log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=LOG_KEEP, encoding="utf-8")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_err = logging.StreamHandler(sys.stderr)
    to_err.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(to_file)
    root.addHandler(to_err)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # every store open says its SQLite context
    return path


# --- systemd's notify protocol ---------------------------------------------------------------------
class Notifier:
    """READY / WATCHDOG / STATUS / STOPPING to systemd (sdnotify) when NOTIFY_SOCKET is set; silent otherwise."""

    def __init__(self, env: dict | None = None) -> None:
        env = os.environ if env is None else env
        self.notifier = None
        if env.get("NOTIFY_SOCKET"):
            import sdnotify

            self.notifier = sdnotify.SystemdNotifier()
        usec, pid = str(env.get("WATCHDOG_USEC") or ""), str(env.get("WATCHDOG_PID") or "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_s = int(usec) / 2e6 if self.notifier and usec.isdigit() and int(usec) > 0 and mine else None

    def send(self, *lines: str) -> None:
        if self.notifier is not None:
            self.notifier.notify("\n".join(lines))

    def status(self, text: str) -> None:
        self.send("STATUS=" + status_clean(text))


def status_clean(text: str, limit: int = 200) -> str:
    """One line of latin-1 (sdnotify encodes so), short."""
    line = " ".join(str(text).replace("→", "->").split())
    line = line.encode("latin-1", "replace").decode("latin-1")
    return line if len(line) <= limit else line[:limit - 1] + "~"


def status_of(event: dict) -> str | None:
    """A bus event as the service's STATUS line (None: not worth a line)."""
    kind, c = event.get("type"), event.get("cycle")
    if kind == Kind.CYCLE_STARTED:
        return f"cycle {c}: started ({event.get('trigger')})"
    if kind == Kind.CYCLE_STAGE:
        return f"cycle {c}: {event.get('stage')}" + (" (resumed)" if event.get("resumed") else "")
    if kind == Kind.SCHOOL_WAITING:
        return f"cycle {c}: {event.get('reason')}" if c else f"waiting: {event.get('reason')}"
    if kind == Kind.APPROVAL_WAITING:
        return f"cycle {c}: waiting for approval (nightschool school approve {c})"
    if kind in (Kind.CYCLE_DONE, Kind.CYCLE_REFUSED, Kind.CYCLE_FAILED):
        return f"cycle {c} {kind.split('.')[1]}: {event.get('summary') or event.get('reason')}"
    if kind == Kind.TEAM_REFUSED:
        return f"team: {event.get('reason')}"
    if kind == Kind.RUNTIME_ERROR:
        return f"error in {event.get('loop')}: {event.get('message')}"
    return None


def first_status() -> str:
    from app.core.runtime.school.facade import School

    st = School(open_store()).status()
    if st.get("cycle"):
        return f"cycle {st['cycle']['id']}: {st['cycle']['stage']}"
    waiting = st["next"].get("waiting") or []
    return "waiting: " + "; ".join(waiting) if waiting else "ready for a cycle"


# --- daemon run ------------------------------------------------------------------------------------
def cmd_run(_args) -> int:
    """The runtime in the foreground until SIGTERM / SIGINT; running engines keep running (re-attached next start)."""
    from app.core.runtime.machinery.lock import RuntimeBusy
    from app.core.runtime.supervisor import Runtime

    where = setup_logging()
    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, _frame) -> None:
        got.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    runtime = Runtime(role="daemon")
    try:
        try:
            runtime.start()
        except RuntimeBusy as exc:
            log.error("%s", exc)
            return 1
        except Exception:
            log.exception("the runtime did not start")
            runtime.stop()
            return 1
        log.info("daemon running: pid %s, data dir %s, log %s", os.getpid(), paths.data_dir(), where)
        notifier = Notifier()
        unsubscribe = runtime.bus.subscribe(log_events(notifier))
        notifier.send("READY=1", "STATUS=" + status_clean(first_status()))
        _serve(runtime, notifier, stop)
        unsubscribe()
        log.info("stopping (%s); running engines keep running", signal.Signals(got[0]).name if got else "asked")
        notifier.send("STOPPING=1", "STATUS=stopping")
        runtime.stop()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def log_events(notifier: Notifier):
    """A bus subscriber: each event to the log, the ones worth it as the service's STATUS line."""
    def on(event: dict) -> None:
        body = {k: v for k, v in event.items() if k not in ("seq", "ts", "type")}
        log.log(logging.DEBUG if event.get("type") == Kind.CYCLE_PROGRESS else logging.INFO, "%s %s",
                event.get("type"), body)
        if (line := status_of(event)) is not None:
            notifier.status(line)
    return on


def _serve(runtime, notifier: Notifier, stop: threading.Event) -> None:
    """Wait for a signal; ping the watchdog while every runtime loop is alive (a dead loop: no pings, so systemd
    restarts the daemon)."""
    every = notifier.watchdog_s
    next_ping = time.monotonic()
    dead_said = False
    while not stop.is_set():
        if every is not None and time.monotonic() >= next_ping:
            dead = [t.name for t in getattr(runtime, "_threads", []) if not t.is_alive()]
            if not dead:
                notifier.send("WATCHDOG=1")
            elif not dead_said:
                log.error("runtime loop(s) stopped: %s; no more watchdog pings, systemd restarts the daemon",
                          ", ".join(dead))
                notifier.status(f"loop stopped: {', '.join(dead)}")
                dead_said = True
            next_ping = time.monotonic() + every
        stop.wait(min(1.0, every) if every else 1.0)


# --- daemon status / stop --------------------------------------------------------------------------
def _holder_info() -> dict | None:
    from app.core.runtime.machinery import lock

    found = lock.holder()
    return {k: found.get(k) for k in ("pid", "started", "role", "channel")} if found else None


def cmd_status(args) -> int:
    from app.cli.school import START_HINT, cycle_headline, when
    from app.core.runtime.school import cycles

    holder = _holder_info()
    current = cycles.current(open_store())
    data = {"running": holder is not None, "runtime": holder, "cycle": current.to_dict() if current else None,
            "log": str(log_path()), "unit": str(unit_path()) if unit_path().exists() else None}
    if args.json:
        return print_json(data)
    if holder is None:
        print(f"no runtime runs on this data dir ({paths.data_dir()}); {START_HINT}")
    elif holder["role"] == "daemon":
        print(f"the daemon runs: pid {holder['pid']}, since {when(holder['started'])}; log {log_path()}")
    else:
        print(f"the runtime runs in the {holder['role']} (pid {holder['pid']}, since {when(holder['started'])}), "
              "not in a daemon")
    print(cycle_headline(data["cycle"]) if current else "no cycle is running (nightschool school status)")
    if data["unit"]:
        print(f"systemd user unit: {data['unit']}")
    return 0


def cmd_stop(args) -> int:
    from app.core.base import procs
    from app.core.runtime.machinery import lock

    found = lock.holder()
    if found is None:
        print("no daemon runs on this data dir")
        return 0
    if found.get("role") != "daemon":
        print(f"error: the runtime runs in the {found.get('role')} (pid {found.get('pid')}), not in a daemon: "
              "quit it there", file=sys.stderr)
        return 2
    proc = procs.live_process(found.get("pid"), found.get("started"))
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
    print(f"asked the daemon (pid {found['pid']}) to stop…", flush=True)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        now = lock.holder()
        if now is None or now.get("pid") != found["pid"]:
            print("stopped (running training jobs go on; the next start re-attaches them)")
            return 0
        time.sleep(0.2)
    print(f"error: the daemon (pid {found['pid']}) still holds the lock after {args.timeout:g} s. Its loops finish "
          f"their current step first; see {log_path()}, or end it with `kill {found['pid']}`", file=sys.stderr)
    return 1


# --- systemd user unit -----------------------------------------------------------------------------
def unit_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / UNIT


def daemon_command() -> tuple[list[str], Path | None]:
    """The installed `nightschool` script beside this interpreter, else this interpreter with -m (run from the code's
    folder). Returns (argv, working dir)."""
    script = Path(sys.executable).with_name("nightschool")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "daemon"], None
    return [sys.executable, "-m", "app.cli.main", "daemon"], paths.CODE_ROOT


def _unit_quote(arg: str, exec_line: bool = True) -> str:
    """One word of a unit file: specifiers (and, on Exec lines, variables) escaped, quoted when it holds spaces or
    quotes."""
    arg = arg.replace("%", "%%")
    if exec_line:
        arg = arg.replace("$", "$$")
    if any(c.isspace() for c in arg) or '"' in arg or "\\" in arg or "'" in arg:
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def unit_text() -> str:
    argv, cwd = daemon_command()
    env = [f"Environment={_unit_quote(f'{k}={os.environ[k]}', exec_line=False)}"
           for k in PASSED_ENV if os.environ.get(k)]
    lines = [
        "[Unit]",
        "Description=Nightschool: a small local LLM learns from your coding-agent sessions",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={' '.join(_unit_quote(a) for a in argv)}",
        *([f"WorkingDirectory={str(cwd).replace('%', '%%')}"] if cwd else []),  # a bare path, never quoted
        *env,
        "Environment=PYTHONUNBUFFERED=1",
        "Restart=on-failure",
        "RestartSec=10",
        "WatchdogSec=60",
        "TimeoutStopSec=90",
        "# training engines and the model server run in their own sessions and outlive a stop or restart",
        "KillMode=process",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def systemd_user() -> tuple[str | None, str]:
    """(systemctl's path, '') when a systemd user manager answers; (None, why) otherwise."""
    if not sys.platform.startswith("linux"):
        return None, f"this is {sys.platform}, not Linux"
    exe = shutil.which("systemctl")
    if exe is None:
        return None, "systemctl is not on PATH"
    try:
        done = subprocess.run([exe, "--user", "show-environment"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"systemctl --user does not answer ({exc})"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, f"systemctl --user does not work here ({said[0] if said else f'exit {done.returncode}'})"
    return exe, ""


def _systemctl(exe: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, "--user", *args], capture_output=True, text=True, timeout=120)


def instead(command: str) -> str:
    """What to do where there is no systemd user manager."""
    home = os.environ.get("NIGHTSCHOOL_HOME")
    env = f" (with NIGHTSCHOOL_HOME={home})" if home else ""
    if sys.platform == "darwin":
        how = (f"macOS: a launchd agent, ~/Library/LaunchAgents/nightschool.plist with ProgramArguments "
               f"`{command}`{env}, RunAtLoad and KeepAlive true, then `launchctl load` it")
    elif sys.platform == "win32":
        how = f"Windows: a Task Scheduler task 'At log on' that runs `{command}`{env}"
    else:
        how = (f"run `{command}`{env} from your session's autostart (e.g. ~/.config/autostart/nightschool.desktop "
               f"with Exec={command}) or from your init system")
    return f"To keep the night school running, {how}; or keep `nightschool daemon` open in a terminal."


def cmd_install(_args) -> int:
    from app.core.base.files import atomic_write
    from app.core.runtime.machinery import lock

    argv, _ = daemon_command()
    exe, why = systemd_user()
    if exe is None:
        print(f"no systemd user manager here: {why}. Nothing was installed.")
        print(instead(" ".join(argv)))
        return 1
    path = unit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, unit_text())
    print(f"wrote {path}")
    found = lock.holder()
    if found is not None:
        print(f"note: a runtime already runs in the {found.get('role')} (pid {found.get('pid')}); the service's daemon "
              "waits (restarting every 10 s) until it stops")
    for args in (("daemon-reload",), ("enable", "--now", UNIT)):
        done = _systemctl(exe, *args)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            print(f"error: `systemctl --user {' '.join(args)}` failed: {said or f'exit {done.returncode}'}",
                  file=sys.stderr)
            return 1
    print("enabled and started: it starts at login and restarts after a failure.\n"
          f"  nightschool daemon status · journalctl --user -u nightschool · log {log_path()}\n"
          "  to keep it running after you log out: loginctl enable-linger")
    return 0


def cmd_uninstall(_args) -> int:
    path = unit_path()
    exe, _why = systemd_user()
    if exe is not None and path.exists():
        done = _systemctl(exe, "disable", "--now", UNIT)
        if done.returncode != 0:
            print(f"note: `systemctl --user disable --now {UNIT}` said: {(done.stderr or done.stdout).strip()}")
    existed = path.exists()
    path.unlink(missing_ok=True)
    if exe is not None and existed:
        _systemctl(exe, "daemon-reload")
    print(f"removed {path}" if existed else f"no unit at {path}: nothing to remove")
    return 0


def register(sub) -> None:
    """Add `daemon …` to the main parser's subcommands."""
    dp = sub.add_parser("daemon", help="the night school without a window: run (default), status, stop, install")
    dp.set_defaults(func=cmd_run)
    ds = dp.add_subparsers(title="daemon commands")
    ds.add_parser("run", help="run in the foreground (logs to <data dir>/logs/daemon.log)").set_defaults(func=cmd_run)
    st = ds.add_parser("status", help="who holds the data dir's runtime, since when, the current cycle")
    st.add_argument("--json", action="store_true", help="print the data as JSON, nothing else")
    st.set_defaults(func=cmd_status)
    sp = ds.add_parser("stop", help="ask the running daemon to stop and wait until it has")
    sp.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S, help="seconds to wait (default 90)")
    sp.set_defaults(func=cmd_stop)
    ds.add_parser("install", help="a systemd user unit that starts the daemon at login").set_defaults(
        func=cmd_install)
    ds.add_parser("uninstall", help="stop and remove the systemd user unit").set_defaults(func=cmd_uninstall)

"""The packaged app as a user gets it (slow; CI runs it): packaging/build.sh builds the bundle, the .deb and the
tar.gz; the .deb installs (root), its launcher validates, the installed command runs on a fresh data dir and migrates
an older store, an install over it keeps the data, `dpkg -r` leaves none of its files; the frozen app sets up its own
engine environment from the local caches (an interrupted set-up goes on where it stopped), trains a 2-step job
through it, and a second start finds it and skips the set-up."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from alembic import command

from app.core.base import paths, settings
from app.core.base.store import Store, alembic_config
from app.core.desktop.sysdeps import PACKAGES, Derived, derive_depends
from tests.packaging.test_sysdeps import DEPENDS_TXT, XCB_MINIMUM, assert_explained, hidden_command, window_env

pytestmark = pytest.mark.slow
ROOT = paths.CODE_ROOT
SIZES = (16, 24, 32, 48, 64, 128, 256)


@dataclass
class Built:
    bundle: Path
    deb: Path
    tar: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(["bash", "packaging/build.sh", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    version = paths.app_version()
    [deb], [tar] = list(out.glob(f"nightschool_{version}_*.deb")), list(out.glob(f"nightschool-{version}-*.tar.gz"))
    return Built(ROOT / "build/package/dist/nightschool", deb, tar)


def run(cmd: list[str], home: Path | None = None, check: bool = True, env: dict | None = None,
        **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "NIGHTSCHOOL_ENGINE_PYTHON"}
    if home is not None:
        env["NIGHTSCHOOL_HOME"] = str(home)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=kw.pop("timeout", 900), **kw)
    assert not check or done.returncode == 0, f"{cmd}: {done.stdout[-2000:]} {done.stderr[-3000:]}"
    return done


def revision(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("select version_num from alembic_version").fetchone()[0]


def older_store(home: Path) -> Path:
    """A data dir whose store is one migration behind (as an older Nightschool left it) and holds a setting."""
    store = Store(home / "nightschool.db")
    settings.put(store, "kept", {"by": "the older version"})
    cfg = alembic_config(store.url)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0008")
    store.close()
    return home / "nightschool.db"


def test_the_deb_installs_launches_migrates_and_uninstalls_cleanly(built, tmp_path):
    if os.geteuid() != 0 or not shutil.which("dpkg"):
        pytest.skip("installing a .deb needs root and dpkg (CI has both)")
    head = revision(Store(tmp_path / "head.db").path)
    old = older_store(tmp_path / "old")
    assert revision(old) == "0008"
    try:  # a failed install too is removed below: a package left unconfigured makes apt refuse every later install
        run(["dpkg", "-i", str(built.deb)])
        owned = [Path(p) for p in run(["dpkg-query", "-L", "nightschool"]).stdout.split("\n") if p.strip()]
        assert Path("/usr/bin/nightschool").resolve() == Path("/opt/nightschool/nightschool")
        assert run(["/usr/bin/nightschool", "--version"]).stdout.strip() == f"nightschool {paths.app_version()}"
        entry = Path("/usr/share/applications/nightschool.desktop")
        assert "Exec=/usr/bin/nightschool gui %F" in entry.read_text()
        if shutil.which("desktop-file-validate"):
            assert run(["desktop-file-validate", str(entry)]).stdout.strip() == ""
        for n in SIZES:
            assert Path(f"/usr/share/icons/hicolor/{n}x{n}/apps/nightschool.png").is_file()
        if shutil.which("update-mime-database"):  # postinst refreshed the MIME database
            assert "application/jsonl:*.jsonl" in Path("/usr/share/mime/globs2").read_text()

        fresh = tmp_path / "fresh"
        assert json.loads(run(["nightschool", "jobs", "--json"], home=fresh).stdout) == []
        assert revision(fresh / "nightschool.db") == head  # the store was made and migrated by the frozen app
        assert json.loads(run(["nightschool", "jobs", "--json"], home=old.parent).stdout) == []
        assert revision(old) == head  # an older store migrates forward, keeping what it held
        assert settings.get(Store(old), "kept") == {"by": "the older version"}

        run(["dpkg", "-i", str(built.deb)])  # installed over itself (an upgrade): data dirs untouched
        assert revision(old) == head and settings.get(Store(old), "kept") == {"by": "the older version"}
    finally:
        run(["dpkg", "-r", "nightschool"], check=False)
    left = [p for p in owned if (p.is_file() or p.is_symlink()) and not p.is_dir()]
    assert left == [] and not Path("/opt/nightschool").exists()
    assert (fresh / "nightschool.db").is_file() and old.is_file()  # the users' data dirs stay


def test_the_deb_depends_on_what_the_bundle_needs_from_the_system(built, tmp_path):
    """Every shared object's NEEDED libraries the bundle does not carry, as Debian packages, are the checked-in
    packaging/deb/depends.txt, and the .deb declares them; the frozen app with one of them hidden explains itself."""
    derived = derive_depends(built.bundle)
    listed = Derived.parse(DEPENDS_TXT.read_text(encoding="utf-8"))
    assert derived == listed, (f"{DEPENDS_TXT} is out of date; the bundle changed it so:\n" + "\n".join(
        listed.diff(derived)) + "\nupdate it: .venv/bin/python packaging/depends.py build/package/dist/nightschool --write")
    assert XCB_MINIMUM <= set(derived.depends)
    assert not {p.name for p in built.bundle.rglob("*.so*")} & set(PACKAGES)  # the system's copies, never the build's
    control = {k: run(["dpkg-deb", "-f", str(built.deb), k]).stdout.strip() for k in ("Depends", "Recommends")}
    assert control["Depends"] == ", ".join(derived.depends)
    assert control["Recommends"] == ", ".join(("python3 (>= 3.11)", "python3-venv", *derived.recommends))
    names = run(["tar", "-tzf", str(built.tar)]).stdout.split()
    assert {"depends.txt", "check_depends.sh"} <= {Path(n).name for n in names}

    cmd = hidden_command([str(built.bundle / "nightschool"), "gui"])
    done = subprocess.run(cmd, env=window_env(tmp_path / "home"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert_explained(done.stderr)


def test_the_portable_archive_installs_under_a_home_without_root(built, tmp_path):
    run(["tar", "-xzf", str(built.tar), "-C", str(tmp_path)])
    [folder] = list(tmp_path.glob("nightschool-*"))
    home = tmp_path / "user"
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CONFIG_HOME": str(home / ".config")}
    run(["bash", str(folder / "install.sh"), "--autostart"], env=env)
    command_ = home / ".local/bin/nightschool"
    assert run([str(command_), "--version"], env=env).stdout.strip() == f"nightschool {paths.app_version()}"
    assert (home / ".local/share/applications/nightschool.desktop").is_file()
    assert (home / ".config/autostart/nightschool.desktop").is_file()
    data = home / ".local/share/nightschool"
    data.mkdir(parents=True, exist_ok=True)
    (data / "keep.txt").write_text("mine")
    run(["bash", str(folder / "uninstall.sh")], env=env)
    assert not command_.exists() and not (home / ".local/opt/nightschool").exists()
    assert not (home / ".local/share/applications/nightschool.desktop").exists()
    assert (data / "keep.txt").read_text() == "mine"  # the data dir stays unless --purge-data


def test_the_frozen_app_sets_up_its_engine_resumes_after_a_kill_trains_and_skips_it_next_time(built, tmp_path,
                                                                                                tiny_model, chat_file):
    app, home = str(built.bundle / "nightschool"), tmp_path / "home"
    assert json.loads(run([app, "engine", "status", "--json"], home=home).stdout)["state"] == "missing"
    refused = run([app, "train", str(chat_file), "--model", str(tiny_model), "--max-steps", "2"], home=home,
                  check=False)
    assert refused.returncode != 0 and "nightschool engine setup" in refused.stderr

    # killed halfway (once the packages stage has begun): nothing is lost, the next set-up goes on from there
    proc = subprocess.Popen([app, "engine", "setup", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "NIGHTSCHOOL_HOME": str(home)}, start_new_session=True)
    seen = []
    for line in proc.stderr:
        if line.startswith("{"):
            seen.append(json.loads(line)["stage"])
            if seen[-1] == "packages":
                break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seen and seen[-1] == "packages", seen
    assert json.loads(run([app, "engine", "status", "--json"], home=home).stdout)["state"] == "partial"
    again = run([app, "engine", "setup", "--json"], home=home)
    stages = {json.loads(x)["stage"] for x in again.stderr.splitlines() if x.startswith("{")}
    assert "torch" not in stages and "llama" not in stages and {"packages", "nightschool", "probe"} <= stages
    ready = json.loads(again.stdout)
    assert ready["state"] == "ready" and ready["python"].startswith(str(home / "engine-env"))

    # a 2-step job through that environment
    run([app, "train", str(chat_file), "--model", str(tiny_model), "--max-steps", "2"], home=home, timeout=600)
    [job] = json.loads(run([app, "jobs", "--json"], home=home).stdout)
    assert job["state"] == "completed", job
    assert (Path(job["spec_path"]).parent / "adapter" / "adapter_config.json").is_file()  # the engine's result

    # the next start finds it ready and sets nothing up
    assert json.loads(run([app, "engine", "status", "--check", "--json"], home=home).stdout)["state"] == "ready"
    third = run([app, "engine", "setup", "--json"], home=home)
    assert {json.loads(x)["stage"] for x in third.stderr.splitlines() if x.startswith("{")} <= {"python", "probe"}

    # a broken environment is found by the import probe and repaired
    shutil.rmtree(next((home / "engine-env/lib").glob("python3*/site-packages/peft")))
    broken = json.loads(run([app, "engine", "status", "--check", "--json"], home=home, check=False).stdout)
    assert broken["state"] == "broken" and "peft" in broken["detail"]
    assert json.loads(run([app, "engine", "repair", "--json"], home=home).stdout)["state"] == "ready"

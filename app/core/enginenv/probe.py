"""Is the engine environment whole? Import everything a job needs in its Python and say what is missing."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from app.core.base import paths

MODULES = ("engine", "torch", "transformers", "peft", "trl", "accelerate", "datasets", "llama_cpp")
CODE = f"""
import importlib, json, sys
out = {{"python": "%d.%d.%d" % sys.version_info[:3], "missing": {{}}}}
for name in {MODULES!r}:
    try:
        mod = importlib.import_module(name)
        out[name] = getattr(mod, "__version__", "")
    except Exception as exc:
        out["missing"][name] = f"{{type(exc).__name__}}: {{exc}}"[:300]
if "torch" in out:
    out["cuda"] = bool(sys.modules["torch"].cuda.is_available())
print(json.dumps(out))
"""
TIMEOUT_S = 180


def run(python: Path) -> dict:
    """{"ok", "python", module versions, "missing": {module: why}, "cuda"} — `ok` False with a reason if the
    interpreter is gone or the probe itself failed."""
    if not python.is_file():
        return {"ok": False, "missing": {}, "reason": f"{python} does not exist"}
    try:
        done = subprocess.run([str(python), "-c", CODE], capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=paths.child_env({"PYTHONNOUSERSITE": "1"}), cwd=str(paths.data_dir()),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "missing": {}, "reason": f"the probe did not finish ({exc})"}
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"ok": False, "missing": {}, "reason": f"the probe failed (exit {done.returncode}): {tail}"}
    missing = found["missing"]
    found["ok"] = not missing
    found["reason"] = "; ".join(f"{k} ({v})" for k, v in missing.items())
    return found

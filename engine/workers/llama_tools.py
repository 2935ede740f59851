"""llama.cpp's own tools, found and run: `convert_hf_to_gguf.py` / `convert_lora_to_gguf.py` (from the llama-cpp-python
source of the installed version, with its vendored `gguf-py` first on the path so an installed `gguf` cannot shadow it)
and the quantizer (`llama_cpp.llama_model_quantize`)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

from app.core.base import files
from app.core.ship.errors import ShipError

QUANT_TYPES = {  # name → llama_ftype constant name in llama_cpp
    "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "f16": "LLAMA_FTYPE_MOSTLY_F16",
}
_MEMBERS = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")


def version() -> str:
    return metadata.version("llama_cpp_python")


def tools_dir() -> Path:
    """Where the converter lives: $NIGHTSCHOOL_LLAMA_TOOLS, else <venv>/share/nightschool/llama.cpp-<version>."""
    env = os.environ.get("NIGHTSCHOOL_LLAMA_TOOLS")
    return Path(env) if env else Path(sys.prefix) / "share" / "nightschool" / f"llama.cpp-{version()}"


def _sdists() -> list[Path]:
    from app.core.base import paths

    name = f"llama_cpp_python-{version()}.tar.gz"
    return [p for p in (paths.wheels_dir() / name, Path.home() / ".local/share/nightschool/wheels" / name)
            if p.is_file()]


def extract(sdist: Path, dest: Path) -> Path:
    """The converter scripts, `conversion/` and `gguf-py/` out of a llama-cpp-python source archive."""
    prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
    tmp = dest.with_name(dest.name + ".part")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)
                   and m.name[len(prefix):].startswith(_MEMBERS) and (m.isfile() or m.isdir())]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(tmp, members=members, filter="data")
    files.replace(tmp, dest)
    return dest


def converter(script: str = "convert_hf_to_gguf.py") -> Path:
    """The script's path; extracted from the cached source archive when missing; a ShipError says how to get it."""
    folder = tools_dir()
    if not (folder / script).is_file():
        if sources := _sdists():
            folder.parent.mkdir(parents=True, exist_ok=True)
            extract(sources[0], folder)
    if not (folder / script).is_file():
        raise ShipError(f"llama.cpp's {script} is not installed",
                        why=f"it belongs in {folder} (taken from the llama-cpp-python {version()} source)",
                        fix="run `bash packaging/install.sh` again: it fetches the source and puts the converter there")
    return folder / script


def run_script(args: list[str], log: Path, what: str) -> None:
    """Run a converter script with the vendored gguf-py first on the path; ShipError with its output tail."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tools_dir() / "gguf-py"), str(tools_dir())]),
           "NO_LOCAL_GGUF": "1", "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        code = subprocess.run([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                              stdin=subprocess.DEVNULL).returncode
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-12:]
        raise ShipError(f"{what} failed (exit {code})", why=" | ".join(tail)[-1500:],
                        fix=f"the whole output is in {log}")


def run_in_process(args: list[str], log: Path, what: str) -> None:
    """run_script inside this process: a worker that has just merged the model has torch and transformers imported
    (a second interpreter spends seconds importing them again). The script's output goes to `log` at the descriptor
    level (stdout is the worker's envelope channel). Falls back to run_script when an installed `gguf` is already
    imported (the vendored one must win)."""
    import runpy
    import traceback

    vendored = tools_dir() / "gguf-py"
    loaded = sys.modules.get("gguf")
    if loaded is not None and vendored not in Path(getattr(loaded, "__file__", "") or ".").resolve().parents:
        return run_script(args, log, what)
    for entry in (str(tools_dir()), str(vendored)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    os.environ["NO_LOCAL_GGUF"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    saved, argv, code = (os.dup(1), os.dup(2)), sys.argv, 0
    with log.open("ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            sys.argv = list(args)
            runpy.run_path(args[0], run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except Exception:  # noqa: BLE001 - the converter's failure, told with its output tail like the subprocess
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.argv = argv
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-12:]
        raise ShipError(f"{what} failed (exit {code})", why=" | ".join(tail)[-1500:],
                        fix=f"the whole output is in {log}")


def convert(model_dir: Path, out: Path, log: Path, name: str | None = None) -> Path:
    """HF safetensors folder → f16 GGUF with llama.cpp's converter (chat template and special tokens embedded), run in
    this process."""
    named = ["--model-name", name] if name else []
    run_in_process([str(converter()), str(model_dir), "--outtype", "f16", "--outfile", str(out), *named], log,
                   "llama.cpp's convert_hf_to_gguf.py")
    return out


def convert_lora(adapter_dir: Path, base_dir: Path, out: Path, log: Path) -> Path:
    """A PEFT LoRA adapter → a LoRA GGUF for runtimes that keep the base model (`--lora` / Llama(lora_path=…))."""
    run_script([str(converter("convert_lora_to_gguf.py")), "--base", str(base_dir), "--outtype", "f16",
                "--outfile", str(out), str(adapter_dir)], log, "llama.cpp's convert_lora_to_gguf.py")
    return out


def quantize(src: Path, dst: Path, quant: str, threads: int = 0) -> Path:
    """llama.cpp's quantizer (llama_model_quantize) from an f16 GGUF."""
    import llama_cpp

    if quant not in QUANT_TYPES:
        raise ShipError(f"unknown quantization {quant!r}", fix=f"choose one of {', '.join(QUANT_TYPES)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[quant])
    params.nthread = threads or (os.cpu_count() or 1)
    tmp = dst.with_name(dst.name + ".part")
    code = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if code != 0:
        tmp.unlink(missing_ok=True)
        raise ShipError(f"quantizing to {quant} failed (llama_model_quantize returned {code})",
                        fix="try another quantization (q8_0 or f16 work for every model)")
    files.replace(tmp, dst)
    return dst

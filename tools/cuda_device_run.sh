#!/usr/bin/env bash
# Issue 37's checks on a lent NVIDIA GPU, in one run (docs/cuda.md, "On a GPU"): the CUDA backend's
# tests with TGRAD_REQUIRE_CUDA=1 (the roster on naive/tiled/tc and every kind against the CPU's
# bytes: test_cuda_device.py, test_cuda_device_kinds.py), the conformance scorecard, the attention
# and model measurements against torch on the same GPU (tools/bench_cuda_device.py), and the kinds
# once more through NVIDIA's OpenCL driver. Each step has its own time limit and log in $OUT.
#
# From the repository root, with libtgrad built elsewhere (the machine needs no compiler):
#   OUT=/tmp/cuda-run TGRAD_LIB=path/to/libtgrad.so tools/cuda_device_run.sh
# Python needs numpy, ml_dtypes, cffi, pytest, pytest-xdist, safetensors, torch and transformers;
# wheels in .whl/ (cffi, pycparser) are installed to /tmp/site first when present.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cuda-run}
mkdir -p "$OUT"
ROOT=$(pwd)
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$ROOT/bindings/python:$ROOT:${PYTHONPATH:-}"
export TGRAD_LIB=${TGRAD_LIB:-$ROOT/.devbuild/libtgrad.so}
export TGRAD_REQUIRE_CUDA=1

step() {  # step NAME LIMIT_S COMMAND...: the command's output in $OUT/NAME.log, its tail here
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    echo "== $name (limit ${limit} s)"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "== $name: rc=$rc in $((SECONDS - start)) s"
    tail -n "${TAIL:-20}" "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
TAIL=12 step doctor "${LIMIT_DOCTOR:-30}" python3 -m tgrad doctor --no-peak
cd "$ROOT/tests" || exit 1
TAIL=40 step pytest "${LIMIT_PYTEST:-180}" python3 -m pytest -q -n 8 -p no:cacheprovider --durations=12 -rfE \
    python/test_cuda_device.py python/test_cuda_device_kinds.py
cd "$ROOT" || exit 1
step conformance "${LIMIT_CONFORMANCE:-60}" python3 -m tgrad.conformance --backend cuda --require --write --scorecards "$OUT"
step bench "${LIMIT_BENCH:-120}" python3 tools/bench_cuda_device.py "$OUT/bench.json" --tokens 8
# NVIDIA's OpenCL: the toolkit's ICD loader, and the driver's ICD named if the image lacks the file
loader=$(ls /usr/local/cuda/lib64/libOpenCL.so.1 /usr/local/cuda/targets/x86_64-linux/lib/libOpenCL.so.1 2>/dev/null | head -n 1)
if [ -n "$loader" ]; then
    [ -e /etc/OpenCL/vendors/nvidia.icd ] || { mkdir -p /etc/OpenCL/vendors && echo libnvidia-opencl.so.1 >/etc/OpenCL/vendors/nvidia.icd; }
    cd "$ROOT/tests" || exit 1
    TGRAD_OPENCL_LOADER=$loader TGRAD_OPENCL_DEVICE=nvidia TGRAD_REQUIRE_OPENCL=1 TGRAD_TEST_KINDS_DEVICE=opencl \
        LD_LIBRARY_PATH="/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}" \
        step opencl "${LIMIT_OPENCL:-60}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE python/test_cuda_device_kinds.py
else
    echo "== opencl: no libOpenCL.so.1 in the CUDA toolkit; skipped"
fi

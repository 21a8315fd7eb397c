#!/usr/bin/env bash
# tests/gpu/run.sh - the GPU check of kernels/ (docs/gpu.md), for a machine
# with an NVIDIA GPU and the CUDA toolkit; not run in CI.
#
#   tests/gpu/run.sh
#
# Builds the kernels, their C twins and tests/gpu/test_kernels_gpu.c with
# nvcc and cc directly (no CMake, none of the daemon's dependencies) for the
# GPU that is present, then runs it: every CUDA op against its C twin, the
# gather/scatter bandwidth table against cudaMemcpy, and `kvsbench quality`
# with its CUDA column. Then the daemon's GPU tier on the real driver:
# tests/integration/tiers/gpu/test_gpu_tier with KVS_TEST_GPU_REAL=1 (kvshared --gpu 0,
# a writer and a reader process sharing blocks through the exported CUDA VMM
# fd, a host-only client, demotion GPU -> host with identical bytes); that
# part needs the CMake build (built into $KVS_BUILD_DIR, default
# build-gpu/, with the daemon's dependencies: scripts/deps.sh).
# Environment: CUDA_HOME (/usr/local/cuda), KVS_CUDA_ARCH (sm_XY; default:
# the GPU's own), KVS_BUILD_DIR, KVS_GPU_SKIP_TIER=1 (kernels only).
# Exit: 0 pass, 1 fail (or the tier check could not be built), 77 no GPU.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=$(command -v nvcc || echo "$cuda/bin/nvcc")

if ! nvidia-smi -L 2>/dev/null; then
	echo "run.sh: SKIP: no NVIDIA GPU (nvidia-smi -L failed)"
	exit 77
fi
if [ -z "${KVS_CUDA_ARCH:-}" ]; then
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
	KVS_CUDA_ARCH=${cap:+sm_$cap}
	KVS_CUDA_ARCH=${KVS_CUDA_ARCH:-native}
fi
"$nvcc" --version | tail -n1

out=$(mktemp -d "${TMPDIR:-/tmp}/kvs-gpu.XXXXXX")
trap 'rm -rf "$out"' EXIT
inc="-I$root/kernels -I$root/proto -I$root/client -I$root/tools/kvsbench -I$root/tests -I$root/tests/support -I$cuda/include"
t0=$(date +%s)
pids=""
for f in kernels/kvs_kv_copy.cu kernels/kvs_attention_ref.cu; do
	"$nvcc" -O3 -std=c++17 -arch="$KVS_CUDA_ARCH" -Xcompiler=-Wall,-Wextra \
		$inc -c "$root/$f" -o "$out/$(basename "$f").o" &
	pids="$pids $!"
done
for f in kernels/kvs_kv_copy.c kernels/kvs_attention_ref.c kernels/kvs_cuda.c \
	 proto/error.c tools/kvsbench/bench_quality.c tests/gpu/test_kernels_gpu.c; do
	cc -O2 -std=gnu11 -ffp-contract=off -Wall -Wextra $inc -c "$root/$f" -o "$out/$(basename "$f").o" &
	pids="$pids $!"
done
fail=0
for p in $pids; do
	wait "$p" || fail=1
done
[ "$fail" = 0 ] || { echo "run.sh: build failed"; exit 1; }
"$nvcc" -arch="$KVS_CUDA_ARCH" "$out"/*.o -o "$out/test_kernels_gpu" \
	-L"$cuda/lib64" -lcublas -lm -Xlinker -rpath="$cuda/lib64"
echo "run.sh: built for $KVS_CUDA_ARCH in $(($(date +%s) - t0)) s"
rc=0
"$out/test_kernels_gpu" || rc=1

if [ "${KVS_GPU_SKIP_TIER:-0}" = 1 ]; then
	echo "run.sh: GPU tier check skipped (KVS_GPU_SKIP_TIER=1)"
	exit $rc
fi
b=${KVS_BUILD_DIR:-$root/build-gpu}
if ! { cmake -S "$root" -B "$b" >"$out/cmake.log" 2>&1 &&
       cmake --build "$b" -j"$(nproc)" --target kvshared test_gpu_tier >>"$out/cmake.log" 2>&1; }; then
	tail -n 30 "$out/cmake.log"
	echo "run.sh: FAIL: GPU tier check NOT RUN: the CMake build failed (scripts/deps.sh?)"
	exit 1
fi
echo "run.sh: GPU tier: kvshared --gpu 0 on the real driver"
KVSHARED="$b/kvshared" KVS_TEST_GPU_REAL=1 "$b/tests/test_gpu_tier" || rc=1
exit $rc

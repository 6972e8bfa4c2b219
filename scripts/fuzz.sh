#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (installing it from Debian if missing)
# in build-fuzz/ and fuzzes the NEFF reader for $1 seconds (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "[fuzz] installing clang and its fuzzer runtime"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi
cmake -S . -B build-fuzz -G Ninja -DPython3_EXECUTABLE="$PWD/.venv/bin/python" \
      -DCMAKE_CXX_COMPILER=clang++ -DTN_BUILD_TESTS=OFF -DTN_BUILD_FUZZERS=ON \
      -DTN_OUTPUT_DIR="$PWD/build-fuzz/package" >/dev/null
cmake --build build-fuzz --target neff_reader_fuzzer -j "$(nproc)"
mkdir -p build-fuzz/corpus build-fuzz/artifacts
# Seed the corpus with real NEFFs: the demo's graphs, compiled by the normal build.
TORCH_NEURON_CACHE_DIR="$PWD/build-fuzz/seed-cache" .venv/bin/python -m torch_neuron.demo --steps 2 --no-compare >/dev/null
find build-fuzz/seed-cache -name '*.neff' -exec cp -t build-fuzz/corpus/ {} +
./build-fuzz/neff_reader_fuzzer -max_total_time="$SECONDS_TO_RUN" -artifact_prefix=build-fuzz/artifacts/ \
  build-fuzz/corpus

#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (installing it from Debian if missing)
# in build-fuzz/ and fuzzes one reader for $1 seconds (default 60): the NEFF
# reader, or with FUZZ_TARGET=compile_request_fuzzer the CompileRequest reader,
# or with FUZZ_TARGET=service_request_fuzzer the compile service's request reader,
# or with FUZZ_TARGET=remote_entry_fuzzer the remote cache's (signed) entry reader.
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
TARGET=${FUZZ_TARGET:-neff_reader_fuzzer}
cmake --build build-fuzz --target "$TARGET" -j "$(nproc)"
CORPUS="build-fuzz/corpus-$TARGET"
mkdir -p "$CORPUS" build-fuzz/artifacts
if [ "$TARGET" = neff_reader_fuzzer ] || [ "$TARGET" = remote_entry_fuzzer ]; then
  # Seed the corpus with real NEFFs: the demo's graphs, compiled by the normal build
  # (an unsigned remote entry is a NEFF as it is).
  TORCH_NEURON_CACHE_DIR="$PWD/build-fuzz/seed-cache" .venv/bin/python -m torch_neuron.demo --steps 2 --no-compare >/dev/null
  find build-fuzz/seed-cache -name '*.neff' -exec cp -t "$CORPUS"/ {} +
else
  # Seed it with the requests of a small training step, made by the normal build.
  .venv/bin/python - "$CORPUS" <<'PY'
import sys, torch, torch_neuron
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("neuron")
loss = model(torch.randn(4, 8, device="neuron")).square().mean()
loss.backward()
grads = [p.grad for p in model.parameters()]
request = torch_neuron._C._compile_request([loss] + grads)
if "compile_request" in sys.argv[1]:
    for mode in (0, 1):  # the fuzzer's first byte: 1 takes the graph hash from the nodes
        open(f"{sys.argv[1]}/step-{mode}.bin", "wb").write(bytes([mode]) + request)
else:  # a ServiceRequest: version 1, compile { request }
    def field(number, payload):
        length, n = b"", len(payload)
        while True:
            length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                break
        return bytes([(number << 3) | 2]) + length + payload
    open(f"{sys.argv[1]}/step.bin", "wb").write(b"\x08\x01" + field(2, field(1, request)))
PY
fi
./build-fuzz/"$TARGET" -max_total_time="$SECONDS_TO_RUN" -artifact_prefix=build-fuzz/artifacts/ "$CORPUS"

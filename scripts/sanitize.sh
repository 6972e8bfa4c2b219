#!/usr/bin/env bash
# Builds torch_neuron under a sanitizer and runs the C++ tests and a Python subset
# with it:
#
#   bash scripts/sanitize.sh asan [pytest files or -k ...]   # `make asan`
#   bash scripts/sanitize.sh tsan [pytest files or -k ...]   # `make tsan`
#
# The build lives in build-<kind>/ (its own CMake tree, -DTN_SANITIZE=...), the
# package it makes in build-<kind>/pkg/torch_neuron (the Python sources linked
# in, the instrumented _C and libtorch_neuron.so beside them). The Python tests
# run in-process against that package with the sanitizer's runtime preloaded
# (torch and Python themselves are not instrumented). Left out, with reasons:
# - tests that start child interpreters check those children, which import the
#   checkout's regular build: they are not in the default subset;
# - leak checking in Python (torch and CPython keep allocations to exit):
#   detect_leaks=0 there; the C++ tests run with leak checking on.
# ThreadSanitizer sees synchronization only in instrumented code. Debian's
# Abseil is not instrumented, so to it every absl::Mutex was no lock at all
# (each guarded member looked raced). The tsan build therefore links an Abseil
# of Debian's version built here with -fsanitize=thread (in build-tsan/absl,
# from Debian's source archive, checked against its SHA-256).
# TN_SANITIZE_NO_SETUP=1 skips scripts/setup.sh (a checkout already set up).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
kind=${1:?usage: sanitize.sh asan|tsan [pytest args...]}
shift
case "$kind" in
  asan) flag=address; runtime=libasan.so ;;
  tsan) flag=thread; runtime=libtsan.so ;;
  *) echo "sanitize.sh: unknown sanitizer '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
PY=$ROOT/.venv/bin/python
BUILD=$ROOT/build-$kind
PKG=$BUILD/pkg/torch_neuron
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}

[ "${TN_SANITIZE_NO_SETUP:-0}" = 1 ] || bash scripts/setup.sh _C >/dev/null  # packages, .venv, the regular build
extra=()
if [ "$kind" = tsan ]; then
  ABSL_VERSION=20220623.1  # Debian bookworm's libabsl-dev
  ABSL_SHA256=abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe
  ABSL=$BUILD/absl
  if [ ! -f "$ABSL/lib/cmake/absl/abslConfig.cmake" ]; then
    echo "sanitize.sh: building Abseil $ABSL_VERSION with -fsanitize=thread into $ABSL"
    mkdir -p "$BUILD"
    tarball=$BUILD/abseil_$ABSL_VERSION.orig.tar.gz
    [ -f "$tarball" ] || curl -sSfL -o "$tarball" \
      "http://deb.debian.org/debian/pool/main/a/abseil/abseil_$ABSL_VERSION.orig.tar.gz"
    echo "$ABSL_SHA256  $tarball" | sha256sum -c --quiet - || { echo "sanitize.sh: $tarball is not Debian's Abseil source" >&2; exit 1; }
    rm -rf "$BUILD/absl-src" "$BUILD/absl-build" && mkdir -p "$BUILD/absl-src"
    tar xzf "$tarball" -C "$BUILD/absl-src" --strip-components=1
    cmake -S "$BUILD/absl-src" -B "$BUILD/absl-build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
          -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
          -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" -DCMAKE_INSTALL_PREFIX="$ABSL" \
          -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
    cmake --build "$BUILD/absl-build" -j "$(nproc)" >/dev/null
    cmake --install "$BUILD/absl-build" >/dev/null
  fi
  extra=(-Dabsl_DIR="$ABSL/lib/cmake/absl")
  # Its libraries carry no run path to one another: tests (run at build time
  # too, to list their cases) find them here.
  export LD_LIBRARY_PATH="$ABSL/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
echo "sanitize.sh: configuring $BUILD (-fsanitize=$flag)"
cmake -S . -B "$BUILD" -G Ninja -DPython3_EXECUTABLE="$PY" -DTN_OUTPUT_DIR="$PKG" \
      -DTN_BUILD_TESTS=ON -DTN_SANITIZE="$flag" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
cmake --build "$BUILD" -j "$(nproc)" | { grep -v '^ninja: no work to do' || true; }
# The package's Python modules and subpackages (service/, registry/) beside the
# instrumented libraries.
for f in torch_neuron/*; do
  case "$(basename "$f")" in lib | _C*.so | __pycache__) continue ;; esac
  ln -sfn "$ROOT/$f" "$PKG/$(basename "$f")"
done

# libstdc++ too: Python itself does not link it, and the sanitizer's exception
# interceptors need the real __cxa_throw resolvable when they start.
preload="$(gcc -print-file-name="$runtime") $(gcc -print-file-name=libstdc++.so.6)"
# Abseil and torch are not instrumented; their allocations and locks are seen
# only where they meet instrumented code.
if [ "$kind" = asan ]; then
  cpp_options="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  py_options="detect_leaks=0:halt_on_error=1:alloc_dealloc_mismatch=0"
else
  # scripts/tsan.supp: reports inside Abseil's own synchronization, each with
  # its reason.
  cpp_options="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/tsan.supp"
  py_options="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$ROOT/scripts/tsan.supp"
fi

echo "== $kind: C++ tests =="
(cd "$BUILD" && ASAN_OPTIONS=$cpp_options TSAN_OPTIONS=$cpp_options ctest --output-on-failure -j2)

echo "== $kind: Python subset =="
# In-process tests over tracing, execution, memory, tier-1 kernels, training and
# captured steps; any pytest arguments given replace them.
subset=(tests/python/test_lazy.py tests/python/test_memory.py tests/python/test_copies.py
        tests/python/test_factories.py tests/python/test_tier1_math.py tests/python/test_tier1_strided.py
        tests/python/test_tier1_donation.py tests/python/test_step_graph.py tests/python/test_training.py
        tests/python/test_grad_scaler.py tests/python/test_complex.py)
[ $# -gt 0 ] && subset=("$@")
args=()
for a in "${subset[@]}"; do
  case "$a" in tests/*) args+=("$ROOT/$a") ;; *) args+=("$a") ;; esac
done
# From the package's parent, so `import torch_neuron` finds the instrumented one.
cd "$BUILD/pkg"
LD_PRELOAD=$preload ASAN_OPTIONS=$py_options TSAN_OPTIONS=$py_options \
  "$PY" -m pytest -p no:cacheprovider -q -x --rootdir="$ROOT" "${args[@]}"
echo "$kind: clean"

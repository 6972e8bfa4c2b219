#!/usr/bin/env bash
# Sets up everything torch_neuron needs on a fresh Debian machine, and builds it.
# Idempotent and quick when nothing changed:
#   1. Debian packages (compiler, CMake, Ninja, ccache, Abseil, protobuf, xxHash,
#      GoogleTest, hiredis, OpenSSL and the redis-server the remote-cache tests start),
#      installed with apt-get only when one is missing;
#   2. .venv with torchvision built from source (scripts/torchvision.sh), then
#      torch==2.13.0 and the test tools (requirements-dev.txt), reinstalled only
#      when that file changes;
#   3. the C++ build in build/ (incremental), importable from .venv.
# Arguments name the build targets (default: all, tests included); `make run`
# builds only the library and its Python module.
set -euo pipefail
TARGETS=("$@")
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
STAMPS=$ROOT/.stamps
mkdir -p "$STAMPS"

say() { printf '[setup] %s\n' "$*"; }

# --- 1. system packages ------------------------------------------------------------
PACKAGES=(g++ cmake ninja-build ccache python3-venv libabsl-dev libprotobuf-dev
          protobuf-compiler libxxhash-dev libgtest-dev libgmock-dev libhiredis-dev libssl-dev redis-server clang-format
          patchelf libpng-dev libjpeg-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- 2. virtual environment ----------------------------------------------------------
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
# Before the requirements: timm asks for torchvision, and PyPI's would not load here.
bash scripts/torchvision.sh "$VENV"
req_hash=$(sha256sum requirements-dev.txt | cut -c1-16)
if [ ! -f "$STAMPS/requirements-$req_hash" ]; then
  say "installing requirements-dev.txt into .venv (torch==2.13.0, test tools)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  rm -f "$STAMPS"/requirements-*
  touch "$STAMPS/requirements-$req_hash"
fi

# --- 3. build ------------------------------------------------------------------------
# A development build: CMake writes _C and lib/libtorch_neuron.so straight into
# torch_neuron/, and a .pth file puts this checkout on the venv's import path
# (what an editable install amounts to, without copying through a temp dir).
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
if [ ! -f build/build.ninja ]; then
  say "configuring the C++ build in build/"
  cmake -S . -B build -G Ninja -DPython3_EXECUTABLE="$VENV/bin/python" \
        -DTN_OUTPUT_DIR="$ROOT/torch_neuron" -DTN_BUILD_TESTS=ON >/dev/null
  say "building torch_neuron (a first build takes about 3 minutes on 2 idle cores)"
fi
# pipefail: a failed build fails the set-up (the filter itself always succeeds).
if ! cmake --build build -j "$(nproc)" ${TARGETS[@]:+--target "${TARGETS[@]}"} 2>&1 \
     | { grep -v '^ninja: no work to do' || true; }; then
  say "the C++ build failed (output above)"
  exit 1
fi
# A .venv that is a link to another checkout's venv (a git worktree sharing main's)
# must not be pointed at this checkout: the other checkout would import this one.
# Such a checkout runs with PYTHONPATH set to itself instead.
venv_real=$(realpath "$VENV")
if [ "${venv_real#"$ROOT"/}" = "$venv_real" ]; then
  say "$VENV is $venv_real, outside this checkout: its .pth is left as it is;"
  say "run this checkout with PYTHONPATH=$ROOT"
  PYTHONPATH="$ROOT" "$VENV/bin/python" -c 'import torch_neuron' || { say "the build does not import"; exit 1; }
  exit 0
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$ROOT" > "$site/torch_neuron-dev.pth"
# The package's metadata, as an editable install writes it: its entry points
# make `import torch` load torch_neuron (PyTorch's device-backend autoload) and
# give torch.compile the "neuron" backend (pyproject.toml has the same two).
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' torch_neuron/version.py)
rm -rf "$site"/torch_neuron-*.dist-info
info="$site/torch_neuron-$version.dist-info"
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: torch_neuron\nVersion: %s\nRequires-Dist: torch==2.13.0\n' \
  "$version" > "$info/METADATA"
printf '[torch.backends]\nneuron = torch_neuron:_autoload\n\n[torch_dynamo_backends]\nneuron = torch_neuron._compile_backend:neuron_backend\n' \
  > "$info/entry_points.txt"
echo "torch_neuron scripts/setup.sh" > "$info/INSTALLER"
printf '%s,,\n' "torch_neuron-dev.pth" "${info##*/}/METADATA" "${info##*/}/entry_points.txt" \
  "${info##*/}/INSTALLER" "${info##*/}/RECORD" > "$info/RECORD"
"$VENV/bin/python" -c 'import torch_neuron' || { say "the build does not import"; exit 1; }
say "ready: $VENV/bin/python -c 'import torch_neuron' works"

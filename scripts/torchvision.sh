#!/usr/bin/env bash
# Puts torchvision into .venv, built from source against the CPU torch==2.13.0
# (called by scripts/setup.sh before requirements-dev.txt, which asks for timm,
# which imports torchvision).
#
# Why from source: PyPI's torchvision wheels for x86_64 are CUDA builds, and their
# compiled operators (nms, roi_align, ...) link against torch's CUDA libraries, so
# beside the CPU torch `import torchvision` fails ("operator torchvision::nms does
# not exist"); PyPI has no source distribution. The source is upstream's release
# tarball as Debian's archive keeps it (the "orig" tarball of its pytorch-vision
# package, in Debian 13 "trixie"), checked against a pinned SHA-256.
#
# torchvision 0.21.0 is the newest release that archive serves; it was released
# beside torch 2.6, and its operators and Python code build and run against
# torch 2.13.0 (tests/python/test_torchvision.py checks both on neuron against the CPU).
#
# The built wheel is kept in ~/.cache/torch_neuron/ (a first build takes about
# 8 CPU-minutes); later set-ups, and CI's clean clones, install it from there.
set -euo pipefail
VENV=$1
VERSION=0.21.0
SHA256=0a4a967bbb7f9810f792cd0289a07fb98c8fb5d1303fae8b63e3a6b05d720058
URL=http://deb.debian.org/debian/pool/main/p/pytorch-vision/pytorch-vision_${VERSION}.orig.tar.gz
TORCH=2.13.0
# setuptools 81 dropped pkg_resources, which torchvision 0.21's setup.py imports.
SETUPTOOLS=80.9.0

say() { printf '[setup] %s\n' "$*"; }

installed=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torchvision"))' 2>/dev/null || true)
[ "$installed" = "$VERSION" ] && exit 0

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/torch_neuron
py_tag=$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel_dir=$CACHE/torchvision-$VERSION-torch$TORCH-$py_tag
wheel=$(ls "$wheel_dir"/torchvision-"$VERSION"-*.whl 2>/dev/null | head -1 || true)

if [ -z "$wheel" ]; then
  say "building torchvision $VERSION from source against torch $TORCH (once; about 8 CPU-minutes)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  curl -fsSL --retry 3 -o "$work/src.tar.gz" "$URL" || {
    say "could not download $URL"; exit 1; }
  echo "$SHA256  $work/src.tar.gz" | sha256sum -c --quiet - || {
    say "torchvision's source tarball does not match its pinned SHA-256"; exit 1; }
  tar -xzf "$work/src.tar.gz" -C "$work"
  # Its own build environment: torch pinned, and the setuptools its setup.py needs.
  "$VENV/bin/python" -m venv "$work/build-env"
  "$work/build-env/bin/python" -m pip install -q --disable-pip-version-check \
    "torch==$TORCH" "setuptools==$SETUPTOOLS" wheel
  mkdir -p "$wheel_dir"
  # The operators and image decoding (PNG, JPEG); no CUDA, no video, no WebP.
  (cd "$work/vision-$VERSION" &&
   env FORCE_CUDA=0 TORCHVISION_USE_NVJPEG=0 TORCHVISION_USE_VIDEO_CODEC=0 TORCHVISION_USE_FFMPEG=0 \
       TORCHVISION_USE_WEBP=0 BUILD_VERSION=$VERSION MAX_JOBS=$(nproc) TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
       "$work/build-env/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation \
       --no-deps -w "$work/dist" . ) || { say "building torchvision failed (output above)"; exit 1; }
  mv "$work"/dist/torchvision-"$VERSION"-*.whl "$wheel_dir"/
  wheel=$(ls "$wheel_dir"/torchvision-"$VERSION"-*.whl | head -1)
fi
say "installing torchvision $VERSION (built from source) into $VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"

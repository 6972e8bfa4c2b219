#!/usr/bin/env bash
# Applies .clang-format to the C++ sources (csrc/, tests/cpp/), or with --check
# fails listing the files that differ. Installs Debian's clang-format when it
# is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "[format] installing clang-format"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-format >/dev/null
fi
# Tracked and new (untracked, not ignored) files: a new file is checked before its first commit.
mapfile -t files < <(git ls-files --cached --others --exclude-standard 'csrc/*.cc' 'csrc/*.h' 'tests/cpp/*.cc' 'tests/cpp/*.h')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
  echo "[format] ${#files[@]} files formatted as .clang-format says"
else
  clang-format -i "${files[@]}"
fi

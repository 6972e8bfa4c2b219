#!/usr/bin/env bash
# Runs every test: GoogleTest through ctest, then pytest. Ends with one line,
# "summary: N passed, N failed", and exits non-zero if anything failed.
# TORCH_NEURON_TEST_ALL=1 includes the tests marked slow.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

echo "== C++ tests (ctest) =="
(cd build && ctest --output-on-failure -j2) | tee "$log/ctest.txt"
cpp_rc=${PIPESTATUS[0]}
cpp_total=$(grep -oE 'tests failed out of [0-9]+' "$log/ctest.txt" | grep -oE '[0-9]+$' || echo 0)
cpp_failed=$(grep -oE '[0-9]+ tests failed' "$log/ctest.txt" | grep -oE '^[0-9]+' || echo 0)
[ "$cpp_rc" -ne 0 ] && [ "$cpp_failed" -eq 0 ] && cpp_failed=1

echo "== Python tests (pytest) =="
marker=()
[ "${TORCH_NEURON_TEST_ALL:-0}" = 1 ] && marker=(-m "")
$PY -m pytest tests/python -q -p no:cacheprovider "${marker[@]}" | tee "$log/pytest.txt"
py_rc=${PIPESTATUS[0]}
last=$(grep -E '(passed|failed|error)' "$log/pytest.txt" | tail -1)
py_passed=$(echo "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
py_failed=$(( $(echo "$last" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0) + \
              $(echo "$last" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+' || echo 0) ))
[ "$py_rc" -ne 0 ] && [ "$py_failed" -eq 0 ] && py_failed=1

passed=$(( cpp_total - cpp_failed + py_passed ))
failed=$(( cpp_failed + py_failed ))
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

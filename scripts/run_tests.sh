#!/usr/bin/env bash
# Runs every test: GoogleTest through ctest, then pytest (a line per test file
# as it runs, the slowest tests at the end). Ends with one line,
# "summary: N passed, N failed, N xfailed, N skipped", and exits non-zero if
# anything failed. TORCH_NEURON_TEST_ALL=1 includes the tests marked slow.
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
$PY -m pytest tests/python tests/registry -p no:cacheprovider --durations=15 --durations-min=5 "${marker[@]}" \
  | tee "$log/pytest.txt"
py_rc=${PIPESTATUS[0]}
last=$(grep -E '(passed|failed|error)' "$log/pytest.txt" | tail -1)
count() { echo "$last" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
py_passed=$(count passed)
py_failed=$(( $(count failed) + $(count error) ))
py_xfailed=$(count xfailed)
py_skipped=$(count skipped)
[ "$py_rc" -ne 0 ] && [ "$py_failed" -eq 0 ] && py_failed=1

passed=$(( cpp_total - cpp_failed + py_passed ))
failed=$(( cpp_failed + py_failed ))
echo "summary: $passed passed, $failed failed, $py_xfailed xfailed, $py_skipped skipped"
[ "$failed" -eq 0 ]

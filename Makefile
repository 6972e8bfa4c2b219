# torch_neuron's entry points. `make run` and `make test` work on a fresh machine:
# both run scripts/setup.sh first (system packages, .venv, build), which is quick
# when nothing changed.
PY := .venv/bin/python
.DEFAULT_GOAL := run

.PHONY: setup run test test-all test-cpp test-python wheel wheel-check fuzz bench bench-quick clean \
	conformance conformance-report

setup:
	@bash scripts/setup.sh

# The main job: a demo training loop on the neuron device (the C++ tests are
# not built for it).
run:
	@bash scripts/setup.sh _C
	@$(PY) -m torch_neuron.demo

# Every test (C++ through ctest, Python through pytest), one summary line at the end.
test: setup
	@bash scripts/run_tests.sh

# Also the slow checks (wheel build and install into a fresh venv).
test-all: setup
	@TORCH_NEURON_TEST_ALL=1 bash scripts/run_tests.sh

test-cpp: setup
	@cd build && ctest --output-on-failure

test-python: setup
	@$(PY) -m pytest tests/python -q

wheel: setup
	@$(PY) -m pip wheel --no-build-isolation --no-deps -w dist .

wheel-check: setup
	@$(PY) -m pytest tests/python -q -m slow

# Coverage-guided fuzzing of the NEFF reader with libFuzzer + ASan (clang), for
# FUZZ_SECONDS (default 60). Crashes are written to build-fuzz/artifacts/.
FUZZ_SECONDS ?= 60
fuzz: setup
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

# The full OpInfo conformance sweep (every op of op_db; a few minutes on 2 cores):
# rewrites tests/conformance/results.json and docs/CONFORMANCE.md. The default
# test command runs a fixed slice of it against the committed results.
conformance: setup
	@$(PY) tests/conformance/sweep.py

# docs/CONFORMANCE.md from the committed results (after editing known_failures.py).
conformance-report: setup
	@$(PY) tests/conformance/sweep.py --report-only

# Every benchmarks/bench_*.py, each in its own process (JSON in benchmarks/results/),
# then docs/PERFORMANCE.md and its plots in docs/performance/ from the results.
bench: setup
	@$(PY) benchmarks/run_all.py

# A smoke run of every benchmark (--quick): results only, docs/ untouched.
bench-quick: setup
	@$(PY) benchmarks/run_all.py --quick

clean:
	rm -rf build build-fuzz dist .stamps torch_neuron/_C*.so torch_neuron/lib *.egg-info

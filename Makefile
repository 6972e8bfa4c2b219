# torch_neuron's entry points. `make run` and `make test` work on a fresh machine:
# both run scripts/setup.sh first (system packages, .venv, build), which is quick
# when nothing changed.
PY := .venv/bin/python
.DEFAULT_GOAL := run

.PHONY: setup run test test-all test-cpp test-python test-tiered wheel wheel-check fuzz bench bench-quick clean \
	conformance conformance-report zoo zoo-subset zoo-compile zoo-generate validate asan tsan registry-test registry-record \
	pytorch-suites format format-check

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

# Training tests with tiered compilation on, as users run (the default suite
# turns it off so compile counts are exact; its zoo subset runs tiered).
test-tiered: setup
	@TORCH_NEURON_TIERED_COMPILE=1 $(PY) -m pytest -q tests/python/test_training.py \
	  tests/python/test_workloads.py -k "not compiles_only_while_warming_up" tests/python/test_tiered_compile.py

wheel: setup
	@$(PY) -m pip wheel --no-build-isolation --no-deps -w dist .

wheel-check: setup
	@$(PY) -m pytest tests/python -q -m slow

# Coverage-guided fuzzing of the NEFF reader (FUZZ_TARGET=compile_request_fuzzer:
# the CompileRequest reader; service_request_fuzzer, remote_entry_fuzzer: the
# service's and the remote cache's readers) with libFuzzer + ASan (clang), for
# FUZZ_SECONDS (default 60). Crashes are written to build-fuzz/artifacts/.
FUZZ_SECONDS ?= 60
fuzz: setup
	@FUZZ_TARGET=$(FUZZ_TARGET) bash scripts/fuzz.sh $(FUZZ_SECONDS)

# The C++ tests and a Python subset under AddressSanitizer / ThreadSanitizer, in
# build-asan/ or build-tsan/ (scripts/sanitize.sh says what each leaves out and
# why). SANITIZE_TESTS="tests/python/test_x.py ..." picks other Python tests.
asan: setup
	@bash scripts/sanitize.sh asan $(SANITIZE_TESTS)

tsan: setup
	@bash scripts/sanitize.sh tsan $(SANITIZE_TESTS)

# The full OpInfo conformance sweep (every op of op_db; a few minutes on 2 cores):
# rewrites tests/conformance/results.json and docs/CONFORMANCE.md. The default
# test command runs a fixed slice of it against the committed results.
conformance: setup
	@$(PY) tests/conformance/sweep.py

# docs/CONFORMANCE.md from the committed results (after editing known_failures.py).
conformance-report: setup
	@$(PY) tests/conformance/sweep.py --report-only

# PyTorch's own device-generic test files (../shared/pytorch-tests) against neuron,
# each suite in processes of its own, every failure checked against its CPU twin;
# writes docs/PYTORCH_SUITES.md. Twenty suites, the big ones as fixed 1-in-N samples
# (SAMPLES in run.py; estimated under 2 hours on 2 cores). Resumes from build/pytorch_suites
# (SUITES_ARGS=--fresh starts over). Says so and does nothing where the files are absent.
SUITES_ARGS ?=
pytorch-suites: setup
	@$(PY) tests/pytorch_suites/run.py $(SUITES_ARGS)

# The whole model zoo (tests/zoo/): every catalog entry trained 3 steps on neuron and
# on the CPU, each in its own process, both cores, a progress line per entry; then
# docs/ZOO.md and docs/zoo/by_trait.png from the results. Fails when an entry fails
# without a known reason (tests/zoo/report.py KNOWN_CAUSES). ZOO_RESUME=1 continues
# an interrupted sweep from its results file. Hours at opt level 1; ZOO_OPT_LEVEL=0
# (tier 0) takes about 70 minutes.
ZOO_OPT_LEVEL ?= 1
ZOO_RESULTS ?= build/zoo/results-o$(ZOO_OPT_LEVEL).json
ZOO_ARGS ?=
zoo: setup
	@$(PY) tests/zoo/runner.py --out $(ZOO_RESULTS) --opt-level $(ZOO_OPT_LEVEL) --check \
	  $(if $(filter 1,$(ZOO_RESUME)),--resume) $(ZOO_ARGS); rc=$$?; \
	  $(PY) tests/zoo/report.py $(ZOO_RESULTS) && exit $$rc

# The whole zoo with each neuron forward under torch.compile(backend="neuron") (runner.py
# --compile; the CPU reference stays eager), one job; then docs/ZOO.md from the committed
# eager results plus these, in a section of its own. A graph that cannot be one program is an
# error naming its op (TORCH_NEURON_COMPILE_FALLBACK off). ZOO_RESUME=1 continues a sweep;
# ZOO_ARGS="--budget 3600" stops starting entries after an hour.
ZOO_COMPILE_RESULTS ?= build/zoo/results-compile-o$(ZOO_OPT_LEVEL).json
zoo-compile: setup
	@$(PY) tests/zoo/runner.py --compile --jobs 1 --out $(ZOO_COMPILE_RESULTS) --opt-level $(ZOO_OPT_LEVEL) --check \
	  $(if $(filter 1,$(ZOO_RESUME)),--resume) $(ZOO_ARGS); rc=$$?; \
	  $(PY) tests/zoo/report.py docs/zoo/results-o0.json --other-level docs/zoo/results-o1.json \
	    --compiled $(ZOO_COMPILE_RESULTS) \
	    $(if $(wildcard docs/zoo/results-generate-o0.json),--generate docs/zoo/results-generate-o0.json) && exit $$rc

# Greedy generate() of the zoo's causal and seq2seq LMs on neuron against the CPU
# (runner.py --generate, tests/zoo/generate.py: the default and the static cache, 16
# tokens, token by token, graphs per call), one job; then docs/ZOO.md from the
# committed results plus these, in a section of its own. About 80 minutes at opt
# level 0. ZOO_RESUME=1 continues a sweep; ZOO_ARGS="--budget 3600" stops early.
ZOO_GENERATE_RESULTS ?= build/zoo/results-generate-o$(ZOO_OPT_LEVEL).json
zoo-generate: setup
	@$(PY) tests/zoo/runner.py --generate --jobs 1 --out $(ZOO_GENERATE_RESULTS) --opt-level $(ZOO_OPT_LEVEL) \
	  --check $(if $(filter 1,$(ZOO_RESUME)),--resume) $(ZOO_ARGS); rc=$$?; \
	  $(PY) tests/zoo/report.py docs/zoo/results-o0.json --other-level docs/zoo/results-o1.json \
	    --compiled docs/zoo/results-compile-o0.json --generate $(ZOO_GENERATE_RESULTS) && exit $$rc

# The zoo's covering subset alone: what `make test` runs (tests/python/test_zoo_subset.py),
# and under torch.compile(backend="neuron") the whole subset (`make test` runs a slice of it).
zoo-subset: setup
	@ZOO_COMPILE_SUBSET=all $(PY) -m pytest tests/python/test_zoo_subset.py -p no:cacheprovider -q

# The shape registry's generated tests: every signature of the committed registry
# (tests/registry/registry.db.gz) replayed on neuron and on the CPU. `make test` runs a
# fixed stratified sample of it. REGISTRY_OPT_LEVEL=1 replays at opt level 1.
REGISTRY_OPT_LEVEL ?= 0
registry-test: setup
	@TORCH_NEURON_REGISTRY_SAMPLE=0 TORCH_NEURON_REGISTRY_OPT_LEVEL=$(REGISTRY_OPT_LEVEL) \
	  $(PY) -m pytest tests/registry -q -p no:cacheprovider

# Records tests/registry/registry.db.gz afresh: the zoo (about 100 minutes at opt level 0),
# the training workloads and the demo, merged (tests/registry/record.py;
# REGISTRY_ARGS="--zoo-budget 3600" stops the zoo part early).
REGISTRY_ARGS ?=
registry-record: setup
	@$(PY) tests/registry/record.py $(REGISTRY_ARGS)

# Staged validation, fastest first, stopping at the first failing stage:
# 1. shape-registry replay (every committed signature), 2. the zoo's covering
# subset, 3. the whole zoo.
validate: setup
	@echo "== validate 1/3: shape-registry replay ==" && \
	  $(PY) -m torch_neuron.registry run tests/registry/registry.db.gz --opt-level $(REGISTRY_OPT_LEVEL)
	@echo "== validate 2/3: zoo covering subset ==" && $(MAKE) --no-print-directory zoo-subset
	@echo "== validate 3/3: whole zoo ==" && $(MAKE) --no-print-directory zoo

# Every benchmarks/bench_*.py, each in its own process (JSON in benchmarks/results/),
# then docs/PERFORMANCE.md and its plots in docs/performance/ from the results.
bench: setup
	@$(PY) benchmarks/run_all.py

# A smoke run of every benchmark (--quick): results only, docs/ untouched.
bench-quick: setup
	@$(PY) benchmarks/run_all.py --quick

# C++ layout (.clang-format): apply it, or check that the tree follows it.
format:
	@bash scripts/format.sh

format-check:
	@bash scripts/format.sh --check

clean:
	rm -rf build build-fuzz build-asan build-tsan dist .stamps torch_neuron/_C*.so torch_neuron/lib *.egg-info

# trashfire: `make run` sets everything up and runs the default pipeline; `make test` tests.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONF := $(shell find conf -name '*.yaml')
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.lock build-constraints.txt pyproject.toml
	@test -x $(PY) || python3.11 -m venv $(VENV)
	@echo "installing the pinned stack into $(VENV) (first time: several minutes, ~5.6 GB)"
	@PIP_CONSTRAINT=build-constraints.txt $(PY) -m pip install -q --disable-pip-version-check -r requirements.lock 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -m pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c "import trashfire, torch, art, lifelines, hydra, dvc, adv_lib.attacks" || { echo "install failed: see pip's messages above"; exit 1; }
	@touch $(STAMP)

install: $(STAMP) ## create .venv with the pinned stack (idempotent)

params.yaml: $(CONF) | $(STAMP)
	$(PY) -m trashfire.params

params: $(STAMP) ## compose conf/ into params.yaml (ARGS="model=[resnet18] ..." for overrides)
	$(PY) -m trashfire.params $(ARGS)

dvc-yaml: $(STAMP) ## regenerate dvc.yaml from the stage declarations in src/trashfire/stages
	$(PY) -m trashfire.dvc_yaml

run: $(STAMP) params.yaml ## install, then run the embedded default pipeline (dvc repro)
	@test -d .dvc || dvc init -q
	dvc repro

test: $(STAMP) ## install, then run the fast test suite (pytest-xdist: one worker per core)
	$(PY) -m pytest -m "not slow and not cluster" -q -n auto --dist worksteal

lint: $(STAMP) ## ruff: lint and format check (CI runs it); `make format` rewrites
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/ruff format --check src tests bench tools

format: $(STAMP) ## ruff: fix what can be fixed and format
	$(VENV)/bin/ruff check --fix src tests bench tools
	$(VENV)/bin/ruff format src tests bench tools

# the attack engine's tests on another of PyTorch's CPU kernel sets than the machine's own
# (AVX2 or AVX-512): what they assert must not hang on one CPU's floating-point bits
ENGINE_TESTS := tests/attacks/test_engine.py tests/attacks/test_fab.py tests/attacks/test_apgd.py tests/attacks/test_square.py tests/attacks/test_network.py tests/attacks/test_standard.py tests/attacks/test_autoattack.py tests/attacks/test_attacks.py

test-isa: $(STAMP) ## the attack engine's tests under ATEN_CPU_CAPABILITY=default and =avx2 (CI runs it)
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -m "not slow" -q -n auto --dist worksteal $(ENGINE_TESTS)
	ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest -m "not slow" -q -n auto --dist worksteal $(ENGINE_TESTS)

test-slow: $(STAMP) ## the slow tests (full pipeline runs)
	$(PY) -m pytest -m "slow and not cluster" -q

test-slurm: $(STAMP) ## start a single-node SLURM cluster (tools/slurm/start.sh), run the `cluster` tests (SLURM jobs, caches shared between nodes), stop it (CI runs it)
	tools/slurm/start.sh
	TRASHFIRE_REQUIRE_SLURM=1 $(PY) -m pytest -m cluster -q tests/slurm tests/sweep; status=$$?; tools/slurm/stop.sh; exit $$status

test-kill: $(STAMP) ## SIGKILL train and attack at random moments; reruns must match an uninterrupted run (CI runs it)
	$(PY) -m pytest -q -s tests/pipeline/test_crash_safety.py

bench: $(STAMP) ## time the default pipeline, no-op repro, attack and sweep overheads, survival scaling -> reports/bench.json (ARGS=--keep: into bench/results/ and the benchmark page)
	$(PY) bench/suite.py $(ARGS)

figures: $(STAMP) ## redraw figures and the report from recorded results
	dvc repro figures

# the documentation site: docs/benchmarks.md generated from bench/results/, then MkDocs
# (mkdocs-material, mkdocstrings; requirements-docs.lock) builds it into site/, strict: a
# broken link, heading reference or docstring reference fails the build. The docs stack goes
# into .venv behind its own stamp; it needs no torch, so .venv may be bare when docs runs first.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): requirements-docs.lock
	@test -x $(PY) || python3.11 -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements-docs.lock 2>&1 | grep -v "^WARNING: Location" || true
	@$(VENV)/bin/mkdocs --version || { echo "mkdocs install failed: see pip's messages above"; exit 1; }
	@touch $@

docs: $(DOCS_STAMP) ## generate docs/benchmarks.md from bench/results/, then mkdocs build --strict into site/ (CI runs it)
	$(PY) bench/benchmark_page.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

# mutation testing, outside CI: mutmut (requirements-mutation.lock) changes one operator or
# constant at a time in these modules and runs the tests that call the changed function
# (pyproject.toml's [tool.mutmut]); tools/mutation/mutation_score.py prints the score per module, with
# the equivalent mutants of tools/mutation/mutation_equivalents.md named. MODULES= runs a subset;
# MUTATION_LIMIT=<seconds> stops the run after that long (the rest count as not run).
# A whole run takes hours: caught and listed-equivalent results are kept in the tracked
# tools/mutation/mutation_record.json and restored into a fresh mutants/; tools/mutation/unrun.py names
# the mutants with no result (changed functions, new mutants) and the escaped ones not listed as
# equivalent, and only those run, against a map of tests to functions traced afresh each run
# (MUTATION_FRESH=1 ignores the record and runs every mutant of MODULES).
MUTATION_STAMP := $(VENV)/.mutation-installed
MUTATION_LIMIT ?= 0
MODULES ?= trashfire.core.clocks trashfire.core.stats trashfire.metrics trashfire.metrics.findings trashfire.metrics.validity trashfire.metrics.registry trashfire.metrics.aggregate trashfire.metrics.cards trashfire.metrics.checks trashfire.metrics.summaries trashfire.tables.survival_data trashfire.survival.epsilon trashfire.survival.figures trashfire.survival.fitters trashfire.survival.analysis trashfire.survival.scoring trashfire.survival.expected_time trashfire.tables.datasets trashfire.survival.checks trashfire.survival.convergence trashfire.survival.cure trashfire.survival.competing

$(MUTATION_STAMP): requirements-mutation.lock
	@test -x $(PY) || $(MAKE) install
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements-mutation.lock 2>&1 | grep -v "^WARNING: Location" || true
	@$(VENV)/bin/mutmut --version || { echo "mutmut install failed: see pip's messages above"; exit 1; }
	@touch $@

mutation: $(MUTATION_STAMP) ## mutation testing of metrics/, survival/, core/clocks.py (slow; not CI): score per module
	@mkdir -p mutants
	@if [ -z "$(MUTATION_FRESH)" ]; then $(PY) tools/mutation/mutation_record.py restore; fi
	@rm -f mutants/mutmut-stats.json  # mutmut maps tests to functions afresh: it adds new tests to an old map, never a refactor's new functions
	@env -u PYTHONPATH $(PY) tools/mutation/unrun.py -o mutants/to_run.txt $(if $(MUTATION_FRESH),--all) $(MODULES) > mutants/generate.log 2>&1 \
		|| { tail -c 3000 mutants/generate.log; echo "mutmut could not generate the mutants (log: mutants/generate.log)"; exit 1; }
	@echo "$$(wc -l < mutants/to_run.txt) mutants to run in $(words $(MODULES)) modules"
	@if [ -s mutants/to_run.txt ]; then \
		start=$$(date +%s); \
		timeout --signal=INT $(MUTATION_LIMIT) env -u PYTHONPATH $(VENV)/bin/mutmut run $$(cat mutants/to_run.txt) > mutants/run.log 2>&1; \
		status=$$?; \
		$(PY) tools/mutation/mutation_record.py save; \
		if [ $$status -eq 124 ]; then echo "stopped after $(MUTATION_LIMIT) s (the rest count as not run)"; \
		elif [ $$status -ne 0 ]; then tail -c 3000 mutants/run.log; echo "mutmut failed (log: mutants/run.log)"; exit 1; \
		else echo "ran in $$(( $$(date +%s) - start )) s"; fi; \
	fi
	@$(PY) tools/mutation/mutation_score.py --min 90

clean: ## remove pipeline outputs (not .venv, not the DVC cache)
	rm -rf data/processed models reports logs outputs multirun .sweeps site

.PHONY: help install params dvc-yaml run lint format test test-isa test-slow test-slurm test-kill bench figures docs mutation clean

# crawlplan: two commands on a fresh machine.
#   make demo   set up .venv and run the main job on the embedded default (SQLite)
#   make test   set up .venv and run lint, type checks and the whole test suite
#   make bench  performance figures, each beside a baseline measured in the same run
#               (it installs Scrapy into .venv for bench_vs_scrapy.py: not a dependency)
#               (make bench-solver: the NLP's, which takes about 40 minutes)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install
PYTEST_ARGS ?=
# Two pytest processes (pytest-xdist): most of the suite's wall clock is waiting on loopback
# servers, subprocesses and databases, so two at once halve it on this 2-core machine.
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2

.PHONY: setup debian-packages demo test lint types unit bench bench-solver clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "crawlplan needs Python >= 3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# tests/realweb/ crawl a Debian documentation tree served by nginx on loopback: make test
# (make unit) installs both from Debian with apt-get where it can run (root); elsewhere those
# tests are skipped, and this says so in one line. RUNLEVEL=1: the packages' scripts start no
# nginx service.
DEBIAN_PACKAGES := nginx postgresql-doc-15
debian-packages:
	@if { command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 \
	    && test -f /usr/share/doc/postgresql-doc-15/html/index.html; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: no apt-get here: tests/realweb will be skipped (needs $(DEBIAN_PACKAGES))"; \
	elif [ "$$(id -u)" != 0 ]; then \
	    echo "setup: not root: tests/realweb will be skipped (apt-get install $(DEBIAN_PACKAGES))"; \
	else \
	    echo "setup: apt-get install $(DEBIAN_PACKAGES) (for tests/realweb)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq \
	        --no-install-recommends $(DEBIAN_PACKAGES); } >/dev/null \
	    || echo "setup: apt-get install failed: tests/realweb will be skipped"; \
	fi

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

types: setup
	$(BIN)/mypy

unit: setup debian-packages
	$(BIN)/pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

test: lint types unit

demo: setup
	$(BIN)/crawlplan demo --dir demo-out
	$(BIN)/crawlplan status --db sqlite:///demo-out/crawlplan.db

bench: setup debian-packages
	$(BIN)/python tests/benchmarks/bench_store.py
	$(BIN)/python tests/benchmarks/bench_crawl.py
	$(BIN)/python -m pip install --quiet scrapy
	$(BIN)/python tests/benchmarks/bench_vs_scrapy.py
	$(BIN)/python tests/benchmarks/bench_noise_rules.py
	$(BIN)/python tests/benchmarks/bench_change_share.py
	$(BIN)/python tests/benchmarks/bench_estimators.py
	$(BIN)/python tests/benchmarks/bench_schedules.py
	$(BIN)/python tests/benchmarks/bench_selection.py
	$(BIN)/python tests/benchmarks/bench_lease_hosts.py
	$(BIN)/python tests/benchmarks/bench_opic.py
	$(BIN)/python tests/benchmarks/bench_simulator.py
	$(BIN)/python tests/benchmarks/bench_steady.py
	$(BIN)/python tests/benchmarks/bench_nightly.py

# The solver benchmark runs the plain formulation beside the planner's: about 40 minutes.
bench-solver: setup
	$(BIN)/python tests/benchmarks/bench_solver.py --runs 1

clean:
	rm -rf $(VENV) demo-out bench-results .mypy_cache .ruff_cache .pytest_cache

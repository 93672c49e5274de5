# Two commands for a new user: `make demo` and `make test`. Both set themselves up (as root on
# a fresh Debian machine) and are fast the second time.
SHELL := /bin/bash
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PYTHON := $(BIN)/python
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# ansible-test needs the collection under ansible_collections/<namespace>/<name>/
SANITY_ROOT := $(CURDIR)/.build/ansible_collections/inferops/runbooks

.PHONY: setup options test lint alert-rules sanity unit integration demo bench build clean
.PHONY: versions-venvs gateway-venv integration-dev molecule

setup:
	@scripts/setup.sh

# the roles' argument_specs and defaults, the AWX surveys and plugin_utils/_role_options, written from
# specs/options.yml (each option is written there once)
options: setup
	$(PYTHON) scripts/options.py

# ansible-test sanity and the unit tests side by side (each waits on its own processes half the time),
# each target's output printed whole as it ends
test: setup lint alert-rules
	$(MAKE) --no-print-directory -j2 --output-sync=target sanity unit
	$(MAKE) --no-print-directory integration

lint: setup
	$(PYTHON) scripts/options.py --check
	$(BIN)/ruff check plugins tests bench extensions scripts
	$(BIN)/ruff format --check plugins tests bench extensions scripts
	$(BIN)/mypy -p ansible_collections.inferops.runbooks.plugins
	$(BIN)/mypy extensions/eda/plugins/event_source
	$(BIN)/ansible-lint --profile production

# the Prometheus alert rules the collection ships, checked and unit-tested with Debian's promtool
alert-rules: setup
	promtool check rules extensions/prometheus/inference_server.rules.yml
	promtool test rules extensions/prometheus/tests/inference_server.test.yml

# on the newest ansible-core (tests/ansible-core-versions.txt), with its ansible-test
sanity: setup versions-venvs
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@# the links that let a clone find itself are not collection content (galaxy.yml build_ignore)
	@git ls-files -co --exclude-standard | grep -v -e '^collections/ansible_collections/' -e '^playbooks/collections/' | rsync -a --files-from=- . $(SANITY_ROOT)/
	newest=$$($(PYTHON) -m tests.harness.versions bin newest) && python=$$($(PYTHON) -m tests.harness.versions python newest) && \
	cd $(SANITY_ROOT) && git init -q && git add -A && \
	  PATH="$$newest:$$PATH" $$newest/ansible-test sanity --venv --requirements --python $$python --color no

unit: setup gateway-venv
	$(PYTHON) -m pytest -q tests/unit

# side by side, each lane with its own test fleet: the unit tests and the whole integration suite
# on the oldest and on the newest ansible-core; the unit tests and a short run on the others, then
# the molecule scenarios (tests/harness/versions.py)
integration: setup versions-venvs
	$(PYTHON) -m tests.harness.versions test

# ---- ansible-core versions (tests/ansible-core-versions.txt) and molecule ----------------------
# one venv per version, created with pip, cached outside the repository (INFEROPS_VENV_CACHE),
# ansible-rulebook's (tests/requirements-rulebook.txt) for the Event-Driven Ansible test, and the
# SGLang Model Gateway's
versions-venvs: setup gateway-venv
	$(PYTHON) -m tests.harness.versions setup
	$(PYTHON) -m tests.harness.rulebook setup

# the SGLang Model Gateway (smg, tests/requirements-gateway.txt; and sglang-router 0.3.2,
# tests/requirements-gateway-sglang-router.txt) that the tests of the router path run on this machine,
# each in a venv of its own beside the others (tests/harness/gateway.py)
gateway-venv: setup
	$(PYTHON) -m tests.harness.gateway setup

# the whole integration suite on the development venv only
integration-dev: setup gateway-venv
	$(PYTHON) -m pytest -q tests/integration

molecule: setup
	$(BIN)/molecule test --all

# this collection side by side with the usual playbook and the probe style (~40 min), the three waiting
# through a 5-minute start (the GPU host's CPU per phase, ~25 min), the controller's cost at 1, 16 and 64
# hosts beside the usual playbook's (~8 min), then the precheck's read of a
# 5,000,000-entry journal, first and second run, with and without --grep (~15 min), and the rollout
# page of a 16-host run, its size and time (a second; docs/benchmarks.md)
bench: setup
	$(PYTHON) bench/side_by_side.py
	$(PYTHON) bench/side_by_side.py --cost-only --sizes 1 --repeats 1 --cost-start 300 --stall-limit 400 --budget 700 --scenarios ok
	$(PYTHON) bench/side_by_side.py --cost-only --sizes 1,16,64 --repeats 1 --tools ours,usual --section side_by_side_per_host
	$(PYTHON) bench/precheck_journal.py
	$(PYTHON) bench/rollout_page.py
	$(PYTHON) bench/fail_fast.py --repeats 3
	$(PYTHON) bench/clients.py

demo: setup gateway-venv
	$(PYTHON) -m tests.harness.demo

build: setup
	$(BIN)/ansible-galaxy collection build --force --output-path .build

clean:
	rm -rf .build tests/output .pytest_cache .ruff_cache .mypy_cache

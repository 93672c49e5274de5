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

.PHONY: setup test lint sanity unit integration demo bench build clean

setup:
	@scripts/setup.sh

test: setup lint sanity unit integration

lint: setup
	$(BIN)/ruff check plugins tests bench
	$(BIN)/ruff format --check plugins tests bench
	$(BIN)/mypy -p ansible_collections.inferops.runbooks.plugins
	$(BIN)/ansible-lint --profile production

sanity: setup
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@# the link that lets a clone find itself is not collection content (galaxy.yml build_ignore)
	@git ls-files -co --exclude-standard | grep -v '^collections/ansible_collections/' | rsync -a --files-from=- . $(SANITY_ROOT)/
	cd $(SANITY_ROOT) && git init -q && git add -A && \
	  $(BIN)/ansible-test sanity --venv --requirements --python 3.11 --color no

unit: setup
	$(PYTHON) -m pytest -q tests/unit

integration: setup
	$(PYTHON) -m pytest -q tests/integration

bench: setup
	$(PYTHON) bench/classify_bench.py

demo: setup
	$(PYTHON) -m tests.harness.demo

build: setup
	$(BIN)/ansible-galaxy collection build --force --output-path .build

clean:
	rm -rf .build tests/output .pytest_cache .ruff_cache .mypy_cache

# rlplace: every entry point a person or CI needs. `make demo` and `make test` set everything up themselves.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# The cluster that `make operator`/`demo`/`crds` talk to: KUBECONFIG if you set it, else the local one that
# `make cluster-up` starts. Not exported globally: `make test` leaves KUBECONFIG alone, so the e2e suite
# starts its own local cluster unless you pointed KUBECONFIG at one (kind, say).
operator demo crds: export KUBECONFIG ?= $(CURDIR)/.e2e/kubeconfig

.PHONY: help setup host-packages tools images cluster-up cluster-down monitoring-up crds docs monitoring promtool operator demo test test-unit test-e2e lint bench clean

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

setup: $(VENV)/.installed  ## create .venv and install rlplace with its dev tools

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

host-packages:  ## the Debian packages of HOST_PACKAGES (e2e/versions.env) that are missing, with apt-get as root
	bash e2e/host-packages.sh

tools: host-packages  ## host packages, then build or fetch the local control plane's binaries (cached outside the repo by version)
	bash e2e/cluster/tools.sh

images: setup tools  ## build the real nodes' images without Docker (base, pause, coredns, ray, ray-rlplace, ray-rlinf-test, operator)
	bash e2e/images/build.sh

cluster-up: setup tools images  ## local control plane, kwok GPU nodes and real nodes (kubeconfig: .e2e/kubeconfig)
	bash e2e/cluster/up.sh

monitoring-up:  ## Prometheus + prometheus-operator on the running local cluster, prints its URL (or: RLPLACE_MONITORING=1 make cluster-up)
	bash e2e/cluster/monitoring.sh up

cluster-down:  ## stop the demo operator and every process cluster-up started, and remove the state
	bash e2e/demo.sh stop-operator
	bash e2e/cluster/down.sh
	# A benchmark's own control plane (benchmarks/operator_scale.py: .e2e/bench) and make test's e2e shards
	# (tests/suite.py: .e2e/shard-<i>), left up if the benchmark or the suite was killed.
	for dir in .e2e/bench .e2e/shard-*; do \
	  if [ -d "$$dir" ]; then RLPLACE_E2E_DIR=$(CURDIR)/$$dir bash e2e/cluster/down.sh || exit 1; fi; \
	done

crds: setup  ## regenerate crds/ and the chart's CRDs (and docs/reference/) from the models in operator/rlplace_operator/api/
	$(PY) -m rlplace_operator.api.crdgen
	$(PY) -m rlplace_operator.api.docgen

docs: setup  ## regenerate the RLJob and NodeGroup field reference in docs/reference/ from the models
	$(PY) -m rlplace_operator.api.docgen

monitoring: setup  ## regenerate the chart's Grafana dashboards and alert rules from operator/rlplace_operator/monitoring/
	$(PY) -m rlplace_operator.monitoring

promtool:  ## build promtool alone (the unit tests check the chart's alert rules with it; cached like the other tools)
	bash e2e/cluster/tools.sh --only=promtool

test-unit: setup host-packages promtool  ## tests that need no cluster (Chromium and promtool included), in two processes (the Ray tests together in one)
	$(PY) -m pytest -m 'not e2e' -n 2 --dist loadgroup

test-e2e: setup tools images  ## only the tests that need a cluster (local control plane unless KUBECONFIG is set)
	$(PY) -m pytest -m e2e

test: setup  ## every test, e2e included: builds, lint, unit, then the e2e modules on local clusters side by side (tests/suite.py)
	$(PY) tests/suite.py

lint: setup tools  ## ruff and helm lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	.e2e/bin/helm lint --strict charts/rlplace

demo: setup tools images  ## local cluster + operator + example RLJobs, then kubectl get and a placement table
	bash e2e/demo.sh

operator: setup  ## run the operator in the foreground against KUBECONFIG (default .e2e/kubeconfig)
	$(PY) -m rlplace_operator.main --verbose

bench: setup  ## print the benchmark figures (benchmarks/_harness.py is their shared code, not one of them)
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean: cluster-down
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# dagline: thin entry points for people and CI. Each target creates the virtualenv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench install clean docs

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dagline needs Python 3.11 or newer (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/demo.sh

# AIP-35's ML pipeline with real PySpark: models published, validated and served through signals (3-8 min)
.PHONY: demo-signals
demo-signals: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/ml-signals/demo.sh

lint: $(STAMP)   # ruff, then the import contracts (pyproject.toml [tool.importlinter])
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: lint   # the pinned helm and kubectl, Debian's current Chromium (at or above a floor), then the suite
	$(PY) tests/tools/fetch_k8s_tools.py
	$(PY) tests/tools/install_chromium.py
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/scheduler.py --db sqlite
	$(PY) bench/scheduler.py --db postgres --replicas 1,2,3
	$(PY) bench/backfill.py --db postgres
	$(PY) bench/wakeup.py --db postgres
	$(PY) bench/wakeup.py --db sqlite
	$(PY) bench/k8s_mirror.py
	$(PY) bench/ui_grid.py --db sqlite
	$(PY) bench/scale.py --db postgres --runs 0,100000 --dags 1000

# 3 replicas killed at random for 10 minutes, a throwaway PostgreSQL restarted once; JSON, exit 1 on a violation
.PHONY: chaos
chaos: $(STAMP)
	$(PY) bench/chaos.py --replicas 3 --seconds 600 --throwaway-cluster

docs: $(STAMP)   # docs/reference/cli.md and spec.md, generated from the commands and the spec models
	$(PY) -m dagline.cli.reference

clean:
	rm -rf $(VENV) demo logs dagline.db*

# The chart as an archive a user installs without the source: dist/dagline-<version>.tgz (the pinned helm)
.PHONY: chart
chart: $(STAMP)
	$(PY) tests/tools/fetch_k8s_tools.py
	.cache/tools/helm-v3.17.1/helm package charts/dagline --destination dist

# operator/requirements.lock: the operator image's dependencies, pinned with hashes (after a dependency change)
.PHONY: operator-lock
operator-lock: $(STAMP)
	$(PY) operator/lock.py

.PHONY: crds
crds: $(STAMP)   # crds/ and charts/dagline/crds/, generated from the pydantic models
	$(PY) -m dagline.k8s.crds

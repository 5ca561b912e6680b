# dagline: thin entry points for people and CI. Each target creates the virtualenv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dagline needs Python 3.11 or newer (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/demo.sh

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/scheduler.py --db sqlite
	$(PY) bench/scheduler.py --db postgres
	$(PY) bench/backfill.py --db postgres

clean:
	rm -rf $(VENV) demo logs dagline.db*

# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: venv test soak run bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

test: venv
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

soak: venv
	$(PY) -m pytest -m slow -q $(PYTEST_ARGS)

run: venv
	$(PY) -m strata serve --config config/server.properties

bench: venv
	$(PY) bench/run.py $(BENCH_ARGS)

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build src/*.egg-info

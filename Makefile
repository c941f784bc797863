# Set-up is two commands (README): `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The main job: sync the big example host into the embedded placement, then show it.
run: install
	$(BIN)/compute-agent sync --once --config examples/compute-agent.conf \
	    --driver fake --fake-host examples/big-host.yaml
	$(BIN)/compute-agent show --config examples/compute-agent.conf \
	    --driver fake --fake-host examples/big-host.yaml

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Benchmarks print figures; they are not timed tests.
bench: install
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# Set-up is two commands (README): `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two levels of install, one stamp each: what running the agent needs (the agent and the
# libvirt extra: `make run`, `make sample-config`), then the test extra on top (nova,
# Keystone, hypothesis, ruff, ...: `make install` and every target that tests or lints).
RUN_STAMP := $(VENV)/.installed-run
STAMP     := $(VENV)/.installed
SHARE  := $(VENV)/share
# Generated from the argparse definitions (agent/cli/main.py, agent/cli/commands/): shell
# completion (shtab) and the man page (argparse-manpage). A test checks both.
BASH_COMPLETION := $(SHARE)/bash-completion/completions/compute-agent
ZSH_COMPLETION  := $(SHARE)/zsh/site-functions/_compute-agent
MANPAGE         := $(SHARE)/man/man1/compute-agent.1
CLI_SOURCES     := agent/cli/main.py $(wildcard agent/cli/commands/*.py)
# The venv's own pip (Python 3.11's is 23.x) installs an editable pyproject project (PEP 660,
# pip 21.3+): no upgrade first, and no check for a newer pip on every install.
PIP := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: install run test lint bench clean sample-config corpus

# The development install: the agent with the libvirt and test extras, the completion
# files and the man page.
install: $(STAMP) $(BASH_COMPLETION) $(ZSH_COMPLETION) $(MANPAGE)

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# libvirt-python (the libvirt extra: the libvirt driver and its tests) builds against the
	# system library: its headers and pkg-config first.
	pkg-config --exists libvirt 2>/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libvirt-dev pkg-config; } >/dev/null
	# systemd-python (oslo.log's journal handler) builds against libsystemd likewise.
	pkg-config --exists libsystemd 2>/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libsystemd-dev; } >/dev/null
	# --no-compile: no bytecode for all of every package at install (about a third of pip's CPU
	# time here: SQLAlchemy, Placement, oslo.*); Python writes it for what is imported, once.
	$(PIP) install --quiet --no-compile -e '.[libvirt]'
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PIP) install --quiet -e '.[test,libvirt]'
	touch $(STAMP)

$(BASH_COMPLETION): $(RUN_STAMP) $(CLI_SOURCES)
	mkdir -p $(@D)
	$(BIN)/compute-agent --print-completion bash > $@.tmp && mv $@.tmp $@

$(ZSH_COMPLETION): $(RUN_STAMP) $(CLI_SOURCES)
	mkdir -p $(@D)
	$(BIN)/compute-agent --print-completion zsh > $@.tmp && mv $@.tmp $@

$(MANPAGE): $(RUN_STAMP) $(CLI_SOURCES)
	mkdir -p $(@D)
	$(BIN)/argparse-manpage --module agent.cli.main --function build_parser --prog compute-agent \
	    --project-name compute-agent --version "$$($(BIN)/python -c 'import agent; print(agent.__version__)')" \
	    --manual-title "compute-agent manual" \
	    --description "keeps OpenStack Placement in step with this hypervisor" --output $@

# The main job: one start-up cycle of the service on this machine's real hardware
# (host driver) against the embedded placement, then Placement's view of it. It needs the
# agent alone: nothing under agent/ or drivers/ imports the test extra.
run: $(RUN_STAMP)
	# discover --devices names PCI devices from the system's PCI ID database (Debian's pci.ids).
	test -e /usr/share/misc/pci.ids || test -e /usr/share/hwdata/pci.ids || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pci.ids; } >/dev/null
	$(BIN)/compute-agent run --once --config examples/this-host.conf --driver host
	$(BIN)/compute-agent show --config examples/this-host.conf --driver host

test: install
	# systemd-analyze verifies systemd/compute-agent.service (tests/unit/test_systemd.py skips without it).
	command -v systemd-analyze >/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd; } >/dev/null
	# promtool lints a real scrape of /metrics (tests/functional/test_metrics_scrape.py).
	command -v promtool >/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } >/dev/null
	# groff renders the generated man page, zsh parses its completion (tests/unit/test_shell_files.py).
	command -v groff >/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends groff-base; } >/dev/null
	command -v zsh >/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh; } >/dev/null
	# Placement on MariaDB, as production runs it (tests/helpers/mariadb.py starts a private mariadbd).
	test -x /usr/sbin/mariadbd || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server; } >/dev/null
	# A real libvirtd (test driver only) is stopped and started under the agent (tests/helpers/libvirtd.py).
	test -x /usr/sbin/libvirtd || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvirt-daemon; } >/dev/null
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# The layers of docs/architecture.md (contracts in pyproject.toml).
	$(BIN)/lint-imports
	# On every core (pytest-xdist), four workers at most: each is a process with its own
	# in-process Placement and nova; --dist loadgroup keeps an xdist_group's tests on one
	# worker (those on the session's MariaDB server, tests/helpers/mariadb.py).
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadgroup

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The example configuration, generated from the options in the code (a test checks it is current).
sample-config: $(RUN_STAMP)
	$(BIN)/oslo-config-generator --config-file systemd/compute-agent-config-generator.conf

# The corpus of public host descriptions (tests/corpus/README.md): write every golden
# file again and print what changed; review the diff before committing it.
corpus: install
	$(BIN)/python -m tests.corpus.regen
	$(BIN)/python -m tests.corpus.regen --readme

# Benchmarks print figures; they are not timed tests.
bench: install
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

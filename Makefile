# sweepd: the two commands a user needs are `make tune` and `make test`.
CARGO   ?= cargo
PYTHON  ?= python3
VENV    ?= .venv
CONFIG  ?= supervisor.toml
# PAR=N overrides [worker] max_par for `make tune`.
PAR     ?=
# Where cargo builds (CARGO_TARGET_DIR, or build.target-dir in a cargo config, move it): asked of
# cargo itself, so that `make tune` runs the binary `make build` just built.
TARGET_DIR := $(or $(shell $(CARGO) metadata --format-version 1 --no-deps 2>/dev/null | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'),target)
SWEEPD  := $(TARGET_DIR)/release/sweepd

.PHONY: build tune status test test-rust test-python lint fmt venv clean postgresql

build:
	$(CARGO) build --release

## Run the study in $(CONFIG) (the bundled CPU-only example by default) to its budget.
tune: build
	$(SWEEPD) run -c $(CONFIG) $(if $(PAR),--par $(PAR))

status: build
	$(SWEEPD) status -c $(CONFIG)

## The whole test suite: lint, Rust unit + integration tests (real daemon, real workers,
## real Optuna from PyPI in $(VENV)), and the Python helper's tests.
test: lint venv test-rust test-python

test-rust: venv postgresql
	SWEEPD_TEST_PYTHON=$(abspath $(VENV))/bin/python $(CARGO) test --all-targets

## PostgreSQL's server programs for tests/postgres.rs (each test makes a throwaway cluster of
## its own in a temp dir): Debian's `postgresql` package, installed when missing (as root, or
## through sudo).
postgresql:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null; then :; \
	else echo "installing Debian's postgresql package for the tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

test-python: venv
	$(VENV)/bin/python -m unittest discover -s tests/python

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## The test venv: Optuna from PyPI, for the compatibility tests.
venv: $(VENV)/.installed

$(VENV)/.installed: requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $@

clean:
	$(CARGO) clean
	rm -rf $(VENV) sweepd.db sweepd.db-wal sweepd.db-shm sweepd-logs

# ---------------------------------------------------------------------------------------------
## Install sweepd to run as a systemd service (docs/operations.md). Variables:
##   PREFIX=/usr/local          bin/sweepd, share/sweepd/{python,examples,supervisor.toml},
##                              share/doc/sweepd; sweepd finds its Python helper in
##                              <bin>/../share/sweepd/python, so keep bin/ and share/ siblings
##   DESTDIR=                   staging root for packaging: nothing outside it is touched
##   SYSTEMD_UNIT_DIR=$(PREFIX)/lib/systemd/system   where sweepd@.service goes
##   SWEEPD_STATE_DIR=/var/lib/sweepd                 study directories: sweepd@NAME runs
##                                                     SWEEPD_STATE_DIR/NAME/supervisor.toml
##   SWEEPD_USER=               a dedicated user to run as: created (useradd --system) if missing
##                              and added to group video where it exists; empty: run as root.
##                              Defaults to the User= of a unit installed before, so that a
##                              plain `make install` upgrade does not switch a study to root
##                              (`make install SWEEPD_USER=` does)
##   SWEEPD_BIN=$(TARGET_DIR)/release/sweepd   the binary to install; the default one is (re)built
##                              when a source is newer, any other path is used as it is
## It never calls systemctl: it prints the commands to run.
PREFIX           ?= /usr/local
DESTDIR          ?=
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
SWEEPD_STATE_DIR ?= /var/lib/sweepd
SWEEPD_USER      ?= $(shell sed -n 's/^User=//p' $(DESTDIR)$(SYSTEMD_UNIT_DIR)/sweepd@.service 2>/dev/null)
SWEEPD_BIN       ?= $(SWEEPD)
INSTALL          ?= install

SWEEPD_BINDIR   = $(PREFIX)/bin
SWEEPD_DATADIR  = $(PREFIX)/share/sweepd
SWEEPD_DOCDIR   = $(PREFIX)/share/doc/sweepd
SWEEPD_UNIT     = sweepd@.service
# Worker examples; Cargo's (*.rs) are built with cargo, not run by sweepd.
SWEEPD_EXAMPLES = $(filter-out %.rs,$(wildcard examples/*.*))
SWEEPD_DOCS     = README.md $(wildcard docs/*.md)
# The paths the unit file is written with, rewritten for this install, and its commented-out
# `#User=sweepd` line (`.` for the `#`, which make would read as a comment) made real.
SWEEPD_UNIT_SED = -e 's|/usr/local|$(PREFIX)|g' -e 's|/var/lib/sweepd|$(SWEEPD_STATE_DIR)|g' \
                  $(if $(SWEEPD_USER),-e 's|^.User=sweepd$$|User=$(SWEEPD_USER)|')
# Directories systemd loads system units from; another SYSTEMD_UNIT_DIR gets a warning.
SYSTEMD_UNIT_PATH = /etc/systemd/system /usr/local/lib/systemd/system /usr/lib/systemd/system /lib/systemd/system

.PHONY: install uninstall

# Only for the default SWEEPD_BIN: rebuilt when a source is newer than it (`make build` first,
# as yourself, and `sudo make install` will not need cargo). touch: cargo leaves an up-to-date
# binary's mtime alone.
$(SWEEPD): Cargo.toml Cargo.lock build.rs $(wildcard src/*.rs src/*/*.rs src/*/*/*.rs migrations/* \
		migrations-postgres/*.sql migrations-postgres/functions/*.sql)
	$(CARGO) build --release
	@touch $@

install: $(SWEEPD_BIN)
	$(INSTALL) -d $(DESTDIR)$(SWEEPD_BINDIR) $(DESTDIR)$(SWEEPD_DATADIR)/python \
		$(DESTDIR)$(SWEEPD_DATADIR)/examples $(DESTDIR)$(SWEEPD_DOCDIR) \
		$(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(SWEEPD_STATE_DIR)
	$(INSTALL) -m 0755 $(SWEEPD_BIN) $(DESTDIR)$(SWEEPD_BINDIR)/sweepd
	$(INSTALL) -m 0644 python/sweepd_worker.py python/sweepd_memory.py $(DESTDIR)$(SWEEPD_DATADIR)/python/
	$(INSTALL) -m 0644 $(SWEEPD_EXAMPLES) $(DESTDIR)$(SWEEPD_DATADIR)/examples/
	$(INSTALL) -m 0644 supervisor.toml $(DESTDIR)$(SWEEPD_DATADIR)/supervisor.toml
	$(INSTALL) -m 0644 $(SWEEPD_DOCS) $(DESTDIR)$(SWEEPD_DOCDIR)/
	sed $(SWEEPD_UNIT_SED) contrib/$(SWEEPD_UNIT) > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$(SWEEPD_UNIT).tmp
	chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$(SWEEPD_UNIT).tmp
	mv -f $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$(SWEEPD_UNIT).tmp $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$(SWEEPD_UNIT)
	@if [ -z "$(SWEEPD_USER)" ]; then :; \
	elif [ -n "$(DESTDIR)" ]; then \
		echo "DESTDIR is set: user $(SWEEPD_USER) not created. On the target machine, as root:"; \
		echo "  getent passwd $(SWEEPD_USER) >/dev/null || useradd --system --home-dir $(SWEEPD_STATE_DIR) --no-create-home --shell /usr/sbin/nologin $(SWEEPD_USER)"; \
		echo "  getent group video >/dev/null && usermod -a -G video $(SWEEPD_USER)"; \
	else \
		if getent passwd $(SWEEPD_USER) >/dev/null; then echo "user $(SWEEPD_USER) exists"; \
		else echo "creating system user $(SWEEPD_USER)"; \
			useradd --system --home-dir $(SWEEPD_STATE_DIR) --no-create-home \
				--shell /usr/sbin/nologin $(SWEEPD_USER) || exit 1; \
		fi; \
		if getent group video >/dev/null; then usermod -a -G video $(SWEEPD_USER) || exit 1; \
			echo "user $(SWEEPD_USER) is in group video"; fi; \
	fi
	@echo
	@echo "sweepd installed under $(DESTDIR)$(PREFIX); nothing was started. To run a study, as root:"
	@echo "  systemctl daemon-reload"
	@echo "  install -d $(if $(SWEEPD_USER),-o $(SWEEPD_USER) -g $$(id -gn $(SWEEPD_USER) 2>/dev/null || echo $(SWEEPD_USER)) )$(SWEEPD_STATE_DIR)/mystudy"
	@echo "  cp -r $(SWEEPD_DATADIR)/supervisor.toml $(SWEEPD_DATADIR)/examples $(SWEEPD_STATE_DIR)/mystudy/   # or your own"
	@echo "  $(SWEEPD_BINDIR)/sweepd check -c $(SWEEPD_STATE_DIR)/mystudy/supervisor.toml"
	@echo "  systemctl enable --now sweepd@mystudy"
	@echo "  systemctl status sweepd@mystudy; journalctl -u sweepd@mystudy -f"
	@$(if $(filter $(SYSTEMD_UNIT_DIR),$(SYSTEMD_UNIT_PATH)),:,echo "warning: systemd does not load units from $(SYSTEMD_UNIT_DIR); set SYSTEMD_UNIT_DIR=/etc/systemd/system")

uninstall:
	@echo "Stop and disable every study's unit before this (systemctl disable --now sweepd@NAME)."
	rm -f $(DESTDIR)$(SWEEPD_BINDIR)/sweepd $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$(SWEEPD_UNIT) \
		$(DESTDIR)$(SWEEPD_DATADIR)/python/sweepd_worker.py $(DESTDIR)$(SWEEPD_DATADIR)/python/sweepd_memory.py \
		$(DESTDIR)$(SWEEPD_DATADIR)/supervisor.toml \
		$(addprefix $(DESTDIR)$(SWEEPD_DATADIR)/,$(SWEEPD_EXAMPLES)) \
		$(addprefix $(DESTDIR)$(SWEEPD_DOCDIR)/,$(notdir $(SWEEPD_DOCS)))
	rm -rf $(DESTDIR)$(SWEEPD_DATADIR)/python/__pycache__ $(DESTDIR)$(SWEEPD_DATADIR)/examples/__pycache__
	@for d in $(DESTDIR)$(SWEEPD_DATADIR)/python $(DESTDIR)$(SWEEPD_DATADIR)/examples \
		$(DESTDIR)$(SWEEPD_DATADIR) $(DESTDIR)$(SWEEPD_DOCDIR); do \
		if [ -d "$$d" ]; then rmdir "$$d" 2>/dev/null || echo "left in place, not empty: $$d"; fi; \
	done
	@echo "Kept: $(SWEEPD_STATE_DIR) (the studies) and /var/cache/sweepd$(if $(SWEEPD_USER), and user $(SWEEPD_USER))."
	@echo "Then, as root: systemctl daemon-reload"

# ---------------------------------------------------------------------------------------------
## Benchmarks: results go to docs/benchmarks.md, each between its own markers. One recipe line
## per bench script: add a line to add a benchmark. `make bench GP=1` adds the GP sampler's
## (bench-gp), which needs torch.
.PHONY: bench bench-gp fake-nvml
FAKE_NVML := $(TARGET_DIR)/fake-nvml/libnvidia-ml.so.1
GP      ?=
VENV_GP ?= .venv-gp

bench: venv
bench: build fake-nvml
	$(VENV)/bin/python bench/gpu_bench.py
	$(VENV)/bin/python bench/search_bench.py all
	$(VENV)/bin/python bench/multi_bench.py
	$(VENV)/bin/python bench/conditional_bench.py
	$(VENV)/bin/python bench/prune_bench.py
	$(VENV)/bin/python bench/postgres_bench.py
	$(VENV)/bin/python bench/model_bench.py
	$(if $(GP),$(MAKE) bench-gp)

## sweepd's GP sampler against Optuna's GPSampler (bench/gp_bench.py). Optuna's GP needs torch
## and SciPy: they go into a venv of their own, $(VENV_GP), never into the test venv (torch
## from PyPI brings its CUDA wheels, about 5 GB, even for the CPU it runs on here).
bench-gp: build $(VENV_GP)/.installed
	$(VENV_GP)/bin/python bench/gp_bench.py

$(VENV_GP)/.installed: requirements-test.txt
	$(PYTHON) -m venv $(VENV_GP)
	$(VENV_GP)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt scipy torch
	touch $@

## The fake libnvidia-ml the GPU benchmarks load through SWEEPD_NVML_LIB (no GPU needed).
fake-nvml: $(FAKE_NVML)

$(FAKE_NVML): fake-nvml/fake_nvml.c
	@mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -o $@ $<

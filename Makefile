# Quick start targets: `make run` (set up, then run the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hybridsim-installed
# A CPU build of torch. A bare `torch` from PyPI is a multi-GB CUDA build on Linux;
# elsewhere point this at PyTorch's CPU wheel index, e.g.
#   make run TORCH_SPEC="torch --index-url <PyTorch CPU wheel index>"
TORCH_SPEC ?= torch==2.13.0
SOURCES := setup.py setup.cfg pyproject.toml $(wildcard pyx/*.pyx cuda/* hybridsim/*.py data/*)

.PHONY: run test install bench verify clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel "Cython>=3.0" numpy

$(STAMP): $(BIN)/python $(SOURCES)
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q --no-build-isolation ".[test]"
	touch $@

install: $(STAMP)

# The main job: train an A2C+V-trace agent on hybridsim's CPU engine for about five minutes
# (the `quickstart` recipe, data/recipes/quickstart.toml), then score the policy on
# ale-py's own environment.
# A new directory per run: train refuses to overwrite a finished run (it offers --resume).
RUN_STAMP := $(shell date +%Y%m%d-%H%M%S)
RUN_DIR ?= runs/quickstart-$(RUN_STAMP)
run: install
	$(BIN)/hybridsim train --config quickstart --log-dir $(RUN_DIR)
	$(BIN)/hybridsim eval $(RUN_DIR)/checkpoint.pt --env ale-py --episodes 8

verify: install
	$(BIN)/hybridsim verify --games pong,breakout,space_invaders,ms_pacman,seaquest --frames 2000

test: install
	cd tests && ../$(BIN)/python -m pytest -q -rs -p no:cacheprovider

bench: install
	$(BIN)/hybridsim bench --cpu
	$(BIN)/hybridsim bench --single

clean:
	rm -rf build *.egg-info pyx/*.cpp $(VENV)

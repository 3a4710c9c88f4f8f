# The two commands of the README. Each installs what it needs into .venv/ first (idempotent).
.PHONY: setup nt5 test test-slow lint

setup:
	bash scripts/setup.sh

nt5: setup
	.venv/bin/mtcore run recipes/nt5.yaml

# The fast tier (minutes): every test not marked slow, the four recipes' smoke profiles included.
test: setup
	.venv/bin/python -m pytest -q -m "not slow" --durations=15

# The slow tier: default-profile runs of the recipes and other end-to-end trainings.
test-slow: setup
	.venv/bin/python -m pytest -q -m "slow and not long" --durations=25

# Slow tests past CI's budget: the NT5, HW-TSC and Xiaomi paper-graph rehearsals and the
# every-team WMT score sweep (about 22 minutes).
test-long: setup
	.venv/bin/python -m pytest -q -m long --durations=15

lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy mtcore

# The two commands of the README. Each installs what it needs into .venv/ first (idempotent).
.PHONY: setup nt5 test lint

setup:
	bash scripts/setup.sh

nt5: setup
	.venv/bin/mtcore run recipes/nt5.yaml

test: setup
	.venv/bin/python -m pytest -q

lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy mtcore

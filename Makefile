.PHONY: setup test lint demo fmt

setup:  ## install everything (Debian packages, venv, jars) without running the demo
	bash scripts/setup.sh --no-demo

test:
	.venv/bin/pytest

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

fmt:
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

demo:
	.venv/bin/lakewarden demo

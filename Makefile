.PHONY: setup test quick soak lint demo fmt bench images

setup:  ## install everything (Debian packages, venv, jars) without running the demo
	bash scripts/setup.sh --no-demo

test:
	.venv/bin/pytest

quick:  ## the inner loop: every test that starts no JVM and no other process (under a minute)
	.venv/bin/pytest -q -m "not slow"

soak:  ## lakewarden's services beside live Hudi writers (Flink, version 6; Spark, version 9) and a Delta stream, 4 minutes each (issues 28, 29)
	LAKEWARDEN_SOAK_SECONDS=240 .venv/bin/pytest -n0 -q -s -m soak tests/integration/test_live_writer.py

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

fmt:
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

demo:
	.venv/bin/lakewarden demo

bench:  ## every performance figure (B1-B14) side by side (long: run one with --only); JSON in bench-results.json
	.venv/bin/python -m benchmarks --out bench-results.json

images:  ## container images with no registry: Debian base (debootstrap), slim, full, postgres (scripts/images.sh)
	bash scripts/images.sh

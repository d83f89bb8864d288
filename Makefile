# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if it is
# missing and installs what the project needs; the stamp re-installs when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MESHCTL := $(VENV)/bin/meshctl
STAMP := $(VENV)/.installed-dev
# Later extras (aws, gcp, train) join this list as the features that need them land;
# torch must come as torch==2.13.0 (a CPU build on this kind of machine) through the train extra.
EXTRAS ?= dev,ray

.PHONY: install demo test lint unit integration bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

demo: $(STAMP)
	@set -e; dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; \
	echo "\$$ meshctl init $$dir/mesh"; $(MESHCTL) init "$$dir/mesh"; \
	echo; echo "\$$ meshctl validate $$dir/mesh"; $(MESHCTL) validate "$$dir/mesh"; \
	echo; echo "\$$ meshctl --mesh $$dir/mesh/mesh.yaml pools list"; \
	$(MESHCTL) --mesh "$$dir/mesh/mesh.yaml" pools list; \
	echo; echo "\$$ meshctl policy test $$dir/mesh/policies"; \
	$(MESHCTL) --mesh "$$dir/mesh/mesh.yaml" policy test "$$dir/mesh/policies"; \
	printf 'apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\nspec:\n  pools: {onprem: {free_gpus: 0, queued_jobs: 40, expected_wait_s: 30m}}\n' > "$$dir/busy.yaml"; \
	echo; echo "\$$ meshctl policy explain jobs/batch-embed.yaml --mesh busy.yaml  # on-prem saturated"; \
	$(MESHCTL) --mesh "$$dir/mesh/mesh.yaml" policy explain "$$dir/mesh/jobs/batch-embed.yaml" \
	  --mesh "$$dir/busy.yaml" --policies "$$dir/mesh/policies"; \
	echo; echo "\$$ meshctl explain jobs/batch-embed.yaml --mesh busy.yaml  # the scheduler's plan"; \
	$(MESHCTL) --mesh "$$dir/mesh/mesh.yaml" explain "$$dir/mesh/jobs/batch-embed.yaml" \
	  --mesh "$$dir/busy.yaml" --policies "$$dir/mesh/policies"; \
	echo; echo "\$$ meshctl explain jobs/gang-llm.yaml --mesh busy.yaml"; \
	$(MESHCTL) --mesh "$$dir/mesh/mesh.yaml" explain "$$dir/mesh/jobs/gang-llm.yaml" \
	  --mesh "$$dir/busy.yaml" --policies "$$dir/mesh/policies"; \
	echo; echo "\$$ meshctl providers prices --gpu H100"; $(MESHCTL) providers prices --gpu H100; \
	echo; echo "\$$ meshctl providers prices --region us-east-1 --provider aws"; \
	$(MESHCTL) providers prices --region us-east-1 --provider aws

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy meshctl
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest

unit: $(STAMP)
	$(PY) -m pytest -m unit

integration: $(STAMP)
	$(PY) -m pytest -m "integration or e2e"

bench: $(STAMP)
	$(PY) benchmarks/cli_startup.py
	$(PY) benchmarks/policy_eval.py
	$(PY) benchmarks/schedule.py --trace-dir ../shared/traces/philly
	$(PY) benchmarks/openb_packing.py --trace-dir ../shared/traces/alibaba-openb

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache dist

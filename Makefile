# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if it is
# missing and installs what the project needs; the stamp re-installs when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MESHCTL := $(VENV)/bin/meshctl
STAMP := $(VENV)/.installed-dev
# torch comes as torch==2.13.0 (a CPU build on this kind of machine) through the train extra.
EXTRAS ?= dev,ray,aws,gcp,train,sim,agent,serve,server,postgres

.PHONY: install demo tour sim check test lint unit integration bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

# The main story (scripts/demo.sh), and the longer ones (scripts/tour.sh: a gang job's data
# through the node caches, a node lost under training, the shared API server, an inference surge).
demo: $(STAMP)
	MESHCTL=$(MESHCTL) bash scripts/demo.sh

tour: $(STAMP)
	MESHCTL=$(MESHCTL) bash scripts/tour.sh

# The simulator's example: two policy sets on a 10,000-GPU mesh over the Philly trace
# (examples/sim/README.md); report.json and charts per policy set in sim-out/.
sim: $(STAMP)
	$(MESHCTL) sim compare --mesh examples/sim/mesh.yaml \
	    --policy onprem-only=examples/sim/policies/common,examples/sim/policies/onprem-only.yaml \
	    --policy burst=examples/sim/policies/common,examples/sim/policies/burst.yaml \
	    --trace philly --start-day 26.6 --days 3 --replicate 24 --failures stepfun --seed 0 \
	    --out sim-out

# The tiers and their budgets on a 2-core machine: docs/TESTING.md. Both tiers use both cores
# (pytest-xdist); the tests of a module outside tests/unit stay on one worker, in order
# (tests/conftest.py), since they share the mesh or server the module starts.
WORKERS ?= 2
INTEGRATION_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(WORKERS) --dist loadgroup
INTEGRATION := $(PY) -m pytest -n $(INTEGRATION_WORKERS) --dist loadgroup -m "integration or e2e"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy --explicit-package-bases meshctl tests/differential tests/builders.py
	$(VENV)/bin/lint-imports

# The inner loop: lint and the unit tier, under 5 minutes.
check: lint
	$(PYTEST) -m unit

# Everything, what .ci/run calls: the unit tier on both cores, then the integration tier.
test: lint
	$(PYTEST) -m unit
	$(INTEGRATION)

unit: $(STAMP)
	$(PYTEST) -m unit

integration: $(STAMP)
	$(INTEGRATION)

bench: $(STAMP)
	$(PY) benchmarks/cli_startup.py
	$(PY) benchmarks/policy_eval.py
	$(PY) benchmarks/schedule.py --trace-dir ../shared/traces/philly
	$(PY) benchmarks/openb_packing.py --trace-dir ../shared/traces/alibaba-openb
	$(PY) benchmarks/dispatch.py --history 100000
	$(PY) benchmarks/submit_storm.py
	$(PY) benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) sim-out .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache dist

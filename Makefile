# pko — the two quick-start commands are `make demo` (the main job) and `make test` (everything CI runs).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export PKO_BIN_DIR ?= $(HOME)/.cache/pko/bin

.PHONY: venv tools agent-bin krew quickstart lint test unit demo demo-cluster dev clean soak

# Two stamps: the demo needs pko and its runtime dependencies only; the tests add the dev extras.
$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# A new venv for the tests installs everything in one pip run (and stamps the runtime as installed too).
$(VENV)/.installed: pyproject.toml
	[ -x $(PY) ] || { $(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip; }
	$(PY) -m pip install -q -e '.[dev]'
	touch $(VENV)/.runtime $@

venv: $(VENV)/.installed

# Real binaries built from Go modules into $(PKO_BIN_DIR), cached by name and version, then the package mirror's
# cache (npm, PyPI and Go modules the real programs install in their pods; $(PKO_MIRROR_DIR), keyed by what it
# mirrors) and the test cluster's images (below), cached by content hash. Installs the Debian packages the test bed
# needs first (as root).
export PKO_MIRROR_DIR ?= $(HOME)/.cache/pko/mirror
tools: bins
	$(PY) -m pko.testing.mirrorfill
	$(PY) -m pko.testing.images build

# The binaries alone (no images): what `make check` needs.
.PHONY: bins
bins: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/build.sh

# The README's main job: a local control plane, the operator, an example Program + Stack; prints status and
# outputs, then tears down. `make dev` keeps it running until Ctrl-C.
# Builds only what it runs: etcd, kube-apiserver, kubectl, the Pulumi CLI and its YAML host (no images).
demo: $(VENV)/.runtime
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/build.sh --for demo
	$(VENV)/bin/pko dev --once

dev: $(VENV)/.runtime
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/build.sh --for demo
	$(VENV)/bin/pko dev

# The same demo the way production runs it: a real single-node cluster on this machine (root), the operator
# installed by Helm from the image built from the Dockerfile, the Stack in a workspace pod; then tears down.
# Builds what the pod runtime runs (the node's binaries, Helm, the Python host; the images but the Go operator's).
demo-cluster: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/build.sh --for demo-cluster
	$(VENV)/bin/pko dev --runtime pod --once

# The standalone agent executable the operator image ships (static launcher + PyInstaller onedir tree, one file);
# cached by source hash.
agent-bin: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/agent-bin/build.sh

# `kubectl pko` for krew: the standalone executable's release archive (cached by source hash) and the krew manifest
# for it, in dist/krew/. KREW_URI_BASE is where the release publishes the archive (default: that directory, so
# `krew install --manifest=dist/krew/pko.yaml --archive=dist/krew/<archive>` installs it here).
KREW_URI_BASE ?= file://$(CURDIR)/dist/krew
krew: venv
	rm -rf dist/krew && mkdir -p dist/krew
	cp "$$(PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/kubectl-pko/build.sh | tail -n 1)"/kubectl-pko_v*.tar.gz dist/krew/
	$(PY) -m pko.deploy.krew --uri-base "$(KREW_URI_BASE)" dist/krew/kubectl-pko_v*.tar.gz > dist/krew/pko.yaml
	@echo "dist/krew/pko.yaml"

# The test cluster's container images (no registry: mmdebstrap, buildah, our own OCI archives; needs root and the
# binaries of `make tools`) into $(PKO_IMAGE_DIR); cached by content hash. `IMAGES=pko` builds only the named ones.
.PHONY: images
export PKO_IMAGE_DIR ?= $(HOME)/.cache/pko/images
images: venv
	$(PY) -m pko.testing.images build $(IMAGES)

# deploy/quickstart/install.yaml is rendered from the Helm chart; `make lint` fails when it drifts.
quickstart: venv
	$(PY) -m pko.deploy.quickstart

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pko.deploy.quickstart --check

unit: venv
	$(PY) -m pytest tests/unit -q

# The README's test command: lint and every tier against the real binaries, in three streams at once (the real
# cluster's tiers, the e2e tier, the other local tiers: tools/run-tiers.sh, which runs `make lint` beside them and
# fails when it fails; PKO_TEST_SERIAL=1 for one after the other, lint first). Each stream ends with its 25 slowest
# steps and a cost table per tier; the last line sums them all.
test: tools venv
	PKO_LINT="$(MAKE) --no-print-directory lint" bash tools/run-tiers.sh $(PY)

# The developers' inner loop (a few minutes): lint, the unit and deploy tiers, and one end-to-end smoke test (a
# Program Stack to Ready on the local control plane with the real Pulumi CLI).
.PHONY: check
check: bins lint
	$(PY) -m pytest tests/unit tests/deploy tests/e2e/test_program_stack.py -q -ra --durations=10

# The long versions of the fault tests (docs/reliability.md): 20 operator SIGKILL rounds over 10 Stacks on the local
# runtime and 20 over 10 workspace pods on the real cluster (root, as the cluster tier), a leader handover under
# 10 changing Stacks (make test: 6), 200 Stacks under a low
# --kube-api-qps on the local runtime and 50 workspace pods under one, 150 generated Workspaces
# (docs/hostile-input.md), the migration Go -> pko -> Go (make test runs Go -> pko), and the benchmark smoke with
# every scenario under both operators (make test: three under the Go operator). Ends with the runs' summed tally
# `soak: rounds=R updates=U lost=0 duplicated=0 locked=0 orphaned=0` (non-zero counts fail).
# PKO_CHAOS_SEED=<seed> replays a run's kill points.
.PHONY: soak
soak: tools
	@rm -f .soak-tally
	PKO_SOAK=1 PKO_SOAK_TALLY=.soak-tally $(PY) -m pytest tests/chaos/test_operator_kill.py \
		tests/chaos/test_rate_limit.py tests/chaos/hostile/test_fuzzed_workspaces.py \
		tests/cluster/test_70_operator_kill_pods.py tests/cluster/test_75_leader_handover_pods.py \
		tests/cluster/test_80_rate_limit_pods.py \
		tests/interop/test_30_migration.py tests/interop/test_90_bench_smoke.py -s -p no:logging \
		-o timeout=7200; status=$$?; cat .soak-tally 2>/dev/null; \
	awk '{for (i = 2; i <= NF; i++) { split($$i, kv, "="); sum[kv[1]] += kv[2] }} END { if (NR) printf \
		"soak: rounds=%d updates=%d lost=%d duplicated=%d locked=%d orphaned=%d\n", sum["rounds"], sum["updates"], \
		sum["lost"], sum["duplicated"], sum["locked"], sum["orphaned"] }' .soak-tally 2>/dev/null; \
	rm -f .soak-tally; exit $$status

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

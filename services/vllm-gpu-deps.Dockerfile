# veri/vllm-gpu-deps — the venv of veri/vllm (see services/vllm.Dockerfile): vLLM, its CUDA torch, TRL,
# transformers, peft at services/veri/gpu/stack/gpu-stack.txt, + the trainer's run-time deps, one
# resolution from vendor/wheels/gpu (make vendor-gpu); from vendor/debs/gpu g++ + Python headers
# (triton and torch.compile build their kernels at run time) and libnuma1. Build: make images-gpu.
ARG OS_IMAGE=veri/os-base

FROM ${OS_IMAGE}
# Wheels and .debs come over the build's loopback (scripts/docker/serve-vendor.py), never a COPY.
ARG VENDOR_URL
ARG VLLM_VERSION
RUN test -n "$VENDOR_URL" -a -n "$VLLM_VERSION" || { echo "build with make images-gpu" >&2; exit 1; }; \
    export NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 \
 && mkdir /tmp/debs && cd /tmp/debs \
 && for deb in $(curl -fsS "$VENDOR_URL/debs/packages.txt"); do curl -fsSO "$VENDOR_URL/debs/$deb"; done \
 && dpkg -i ./*.deb >/dev/null && cd / && rm -rf /tmp/debs \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-cache-dir --no-index --find-links "$VENDOR_URL/wheels/" \
      -r "$VENDOR_URL/wheels/requirements.txt" \
 && /opt/venv/bin/python -c 'import importlib.metadata as m, sys, torch; \
      assert m.version("vllm") == sys.argv[1], m.version("vllm"); \
      assert torch.version.cuda and "+cpu" not in torch.__version__, torch.__version__' "$VLLM_VERSION"

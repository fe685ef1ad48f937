# Air-gapped install (scripts/docker/bundle.sh, load.sh):
#   make bundle [MODELS=1] [GPU=1] [BUNDLE_OUT=build/veri-bundle.tar]   online side, after make vendor
#   make load BUNDLE=file [DEST=dir]                                     the box with no network
# The bundle holds every $(IMAGE_PREFIX)/* image here (docker save), vendor/ (GPU wheels with GPU=1),
# the repo at HEAD and, with MODELS=1, build/models; a manifest with sizes and sha256s. On a box
# with no checkout yet: tar -xOf veri-bundle.tar veri-bundle/load.sh | bash -s -- veri-bundle.tar DIR
BUNDLE_OUT ?= build/veri-bundle.tar

.PHONY: bundle load test-airgap

bundle: images ## [MODELS=1] [GPU=1] | images + vendor/ + repo in one archive (air-gapped install)
	@IMAGE_PREFIX=$(IMAGE_PREFIX) VENDOR=$(VENDOR) MODELS=$(MODELS) GPU=$(GPU) BUNDLE_IMAGES="$(BUNDLE_IMAGES)" \
		scripts/docker/bundle.sh $(BUNDLE_OUT)

load: ## BUNDLE=file [DEST=dir] | restore a bundle on a box with no network
	@test -n "$(BUNDLE)" || { echo "usage: make load BUNDLE=build/veri-bundle.tar [DEST=dir]"; exit 2; }
	@scripts/docker/load.sh $(BUNDLE) $(or $(DEST),.)

# The whole air-gapped path as one test (tests/sandbox/test_airgap.py; opt-in, ~7 min + make images).
test-airgap: venv images ## the whole air-gapped path as one test (tests/sandbox/test_airgap.py; ~7 min + make images)
	AIRGAP_TEST=1 $(BIN)/pytest -q -rs -s tests/sandbox/test_airgap.py

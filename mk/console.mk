# The web console (services/veri/services/console): its browser tests need Debian's chromium + chromium-driver.
#   make chromium        install them when missing (scripts/console/chromium.sh; make test needs them)
#   make bench-console   the console's server times over a 100k-rollout index (figures: docs/benchmarks.md)
TEST_PREPARED += chromium

.PHONY: chromium bench-console

chromium: ## Debian chromium + chromium-driver (the console's browser tests; make test installs them)
	@scripts/console/chromium.sh

bench-console: venv tiny-model ## the console's server times over a 100k-rollout index (docs/benchmarks.md)
	$(BIN)/python bench/console_scale.py --model $(TINY_MODEL)

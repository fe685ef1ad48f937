# The web console (services/veri/console): its browser tests need Debian's chromium + chromium-driver.
#   make chromium        install them when missing (scripts/console/chromium.sh; make test needs them)
#   make bench-console   the console's server times over a 100k-rollout index (figures: docs/benchmarks.md)
TEST_PREPARED += chromium

.PHONY: chromium bench-console

chromium:
	@scripts/console/chromium.sh

bench-console: venv tiny-model
	$(BIN)/python bench/console_scale.py --model $(TINY_MODEL)

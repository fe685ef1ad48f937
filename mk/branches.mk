# The fraction of sampled tokens trained, per demo bundle (bench/trained_fraction.py; figures:
# docs/benchmarks.md). Runs each demo live on the scripted tiny model, Claude Code and Codex included.
#   make bench-branches

.PHONY: bench-branches

bench-branches: venv tiny-model claude-code codex ## the fraction of sampled tokens trained, per demo bundle (docs/benchmarks.md)
	VERI_TINY_MODEL=$(TINY_MODEL) VERI_CLAUDE_BIN=$(CLAUDE) VERI_CODEX_BIN=$(CODEX) \
		$(BIN)/python bench/trained_fraction.py --model $(TINY_MODEL)

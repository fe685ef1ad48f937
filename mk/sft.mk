# Traces reused (docs/exporting.md), on the host with the venv (no stack needed):
#   make export-sft JOB=name [ARGS="--min-reward 1 --steps 10:"]   a job's trained rows as build/exports/<job>.sft.jsonl
#   make sft CONFIG=config/sft_tiny.yaml                            TRL's SFTTrainer on them (CPU by default)
.PHONY: export-sft sft

export-sft: venv ## JOB=name [ARGS="--min-reward R --steps A:B"] | a job's trained rows as an SFT dataset (docs/exporting.md)
	@test -n "$(JOB)" || { echo "make export-sft: give JOB=<job name> (a folder under $(VERI_STATE_DIR)/jobs)"; exit 2; }
	$(BIN)/veri export sft "$(JOB)" --output "$(VERI_STATE_DIR)/jobs" $(ARGS)

sft: venv ## CONFIG=FILE | TRL's SFTTrainer on exported rows: a warm start before GRPO
	@test -n "$(CONFIG)" || { echo "make sft: give CONFIG=<sft file> (.yaml or .toml; docs/exporting.md)"; exit 2; }
	$(BIN)/veri sft "$(CONFIG)"

# The fault scenarios (docs/reliability.md) at full size: bench/reliability/run.py runs bench/reliability/scenarios/*.py
# and ends with one table (scenario, runs, outcome, spans lost, 5xx, escapes), also written to
# build/reliability/summary.json. docs/reliability.md shows the last full run.
#   make reliability [ONLY=name] [QUICK=1]    (QUICK=1: the CI-sized variants)
.PHONY: reliability

reliability: venv tiny-model ## [ONLY=name] [QUICK=1] | fault scenarios (bench/reliability), one summary table (docs/reliability.md)
	$(BIN)/python bench/reliability/run.py $(if $(ONLY),--only $(ONLY)) $(if $(QUICK),--quick)

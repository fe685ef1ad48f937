"""One module per scenario: `NAME: str` and `run(quick: bool) -> dict` (the row of the summary table:
scenario, runs, outcome, spans_lost, 5xx, escapes, notes). bench/reliability/run.py runs them all."""

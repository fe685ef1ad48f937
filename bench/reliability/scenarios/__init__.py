"""One module per scenario: `NAME: str` and `run(quick: bool) -> dict` (the row of the summary table:
scenario, runs, outcome, spans_lost, 5xx, escapes, notes). bench/reliability/run.py runs them all."""

from typing import Any


def failing_row(name: str) -> dict[str, Any]:
    """A scenario's row before it has proved anything: it fails unless the scenario says otherwise."""
    return {"scenario": name, "runs": 0, "outcome": "fail", "spans_lost": 0, "5xx": 0, "escapes": 0}

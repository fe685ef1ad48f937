"""`make reliability`: run every fault scenario (bench/reliability/scenarios/*.py) and end with one table.

    python bench/reliability/run.py [--only NAME ...] [--quick]

Each scenario module has `NAME` and `run(quick) -> row` (see scenarios/__init__.py); `--quick` runs the
CI-sized variant. The table (scenario, runs, outcome, spans lost, 5xx, escapes, notes) is printed and
written to build/reliability/summary.json; the exit status is 1 when any scenario failed. A scenario
that raises is a failed row with its error, and the rest still run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402 - after the repo root is importable
from rich.table import Table  # noqa: E402

from bench.reliability.scenarios import failing_row  # noqa: E402

SUMMARY = ROOT / "build" / "reliability" / "summary.json"
COLUMNS = ("scenario", "runs", "outcome", "spans_lost", "5xx", "escapes", "notes")


def scenarios() -> list[ModuleType]:
    import bench.reliability.scenarios as package

    modules = [importlib.import_module(f"{package.__name__}.{info.name}")
               for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]
    return sorted((m for m in modules if hasattr(m, "NAME") and hasattr(m, "run")), key=lambda m: m.NAME)


def run_one(module: ModuleType, quick: bool) -> dict[str, Any]:
    started = time.monotonic()
    try:
        row = dict(module.run(quick))
    except Exception as error:  # noqa: BLE001 - a broken scenario is a failed row, the others still run
        traceback.print_exc()
        row = {**failing_row(module.NAME), "notes": f"raised {type(error).__name__}: {error}".splitlines()[0][:300]}
    missing = [column for column in COLUMNS if column not in row]
    if missing:
        row = {**row, "outcome": "fail", "notes": f"the scenario's row lacks {missing}; {row.get('notes', '')}"}
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def table(rows: list[dict[str, Any]], quick: bool) -> Table:
    out = Table(title=f"veri reliability{' (--quick)' if quick else ''}")
    for column in ("scenario", "runs", "outcome", "spans lost", "5xx", "escapes", "notes"):
        out.add_column(column, justify="right" if column in ("runs", "spans lost", "5xx", "escapes") else "left",
                       overflow="fold")
    for row in rows:
        outcome = f"[green]{row['outcome']}[/]" if row["outcome"] == "pass" else f"[red]{row['outcome']}[/]"
        out.add_row(str(row["scenario"]), str(row["runs"]), outcome, str(row["spans_lost"]), str(row["5xx"]),
                    str(row["escapes"]), str(row["notes"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run veri's fault scenarios; one summary table")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this scenario (repeatable)")
    parser.add_argument("--quick", action="store_true", help="the CI-sized variant of each scenario")
    args = parser.parse_args(argv)
    found = scenarios()
    chosen = found
    if args.only:
        names = {m.NAME for m in found}
        unknown = sorted(set(args.only) - names)
        if unknown:
            parser.error(f"no scenario {', '.join(unknown)}: choose from {', '.join(sorted(names))}")
        chosen = [m for m in found if m.NAME in args.only]
    console = Console()
    rows = []
    for module in chosen:
        console.print(f"[bold]running {module.NAME}[/] ({'quick' if args.quick else 'full'})")
        rows.append(run_one(module, args.quick))
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps({"quick": args.quick, "rows": rows}, indent=2) + "\n")
    console.print(table(rows, args.quick))
    console.print(f"summary: {SUMMARY.relative_to(ROOT)}")
    return 0 if rows and all(row["outcome"] == "pass" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

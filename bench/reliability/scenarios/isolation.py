"""Isolation and egress: tests/stack/test_isolation.py against its own compose stack (make up), whose
probe bundle tries every way out of a gVisor sandbox (policy, trainer, launcher, console, the control
network, docker's socket and TCP ports, other rollouts' sessions and spans, the proxy's control routes,
the archive, the metadata service, the host's environment, host ports on 0.0.0.0 by every host
address; directly and through the egress gateway) and then each bundle egress (none, a list naming
the web fixture, a list not naming it).

spans_lost: none are taken (0). 5xx: answers of 500 and up to the probe's requests. escapes: attempts
that got through (the probe's "REACHED"), its controls left out (the own rollout,
and the web fixture where the bundle's egress allows it); runs: attempts made. The pytest run's
verdict is the outcome too. Quick and full are the same run: it is already CI-sized (about a minute
once the stack is up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "isolation"
REPO = Path(__file__).resolve().parents[3]
# per probe bundle: the attempts that must get through (the probe's controls)
CONTROLS = {
    "isolation_probe": {"own rollout's models", "web fixture direct", "web fixture via gateway"},
    "isolation_probe_allow": {"own rollout's models", "web fixture via gateway"},
    "isolation_probe_none": {"own rollout's models"},
    "isolation_probe_deny": {"own rollout's models"},
}


def count(basetemp: Path) -> tuple[int, list[str], list[str], int]:
    """(attempts, escapes, bundles probed, 5xx answers) over every probe.json the run left."""
    attempts, escapes, bundles, server_errors = 0, [], [], 0
    for path in sorted(basetemp.rglob("probe.json")):
        bundle = next((part.removesuffix("-out") for part in path.parts if part.endswith("-out")), "")
        bundles.append(bundle)
        for name, outcome in json.loads(path.read_text())["attempts"].items():
            attempts += 1
            server_errors += outcome.startswith("blocked: 5")
            if name not in CONTROLS.get(bundle, set()) and not outcome.startswith("blocked"):
                escapes.append(f"{bundle}: {name}: {outcome}")
    return attempts, escapes, bundles, server_errors


def run(quick: bool) -> dict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="veri-isolation-") as base:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                               base, "tests/stack/test_isolation.py"], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ})
        attempts, escapes, bundles, server_errors = count(Path(base))
    passed = done.returncode == 0 and not escapes and len(bundles) == len(CONTROLS)
    notes = f"{len(bundles)} probe bundles, {attempts} attempts; {time.monotonic() - started:.0f} s"
    if escapes:
        notes += "; escaped: " + "; ".join(escapes[:5])
    if done.returncode != 0:
        notes += "; pytest: " + done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "; pytest failed"
    return {"scenario": NAME, "runs": attempts, "outcome": "pass" if passed else "fail", "spans_lost": 0,
            "5xx": server_errors, "escapes": len(escapes), "notes": notes}

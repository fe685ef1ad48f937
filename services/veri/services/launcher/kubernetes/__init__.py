"""The `kubernetes` launcher backend: one Job per rollout under a gVisor RuntimeClass (backend.py), the
objects it creates (objects.py), the shared watches that say how each ends (watch.py), creation pacing
(pacing.py)."""

"""The appliance's commands: `veri stack-env CONFIG` (the compose stack's settings for a job) and
`veri layout` (the GPU plan: which GPU trains, which serve the policy, and why), `veri job status JOB`,
`veri doctor` (the host's facts that decide a first run)."""

from __future__ import annotations

import argparse

from veri.tools.appliance import doctor, job_cmd, layout_cmd, stack_env


def register(commands: argparse._SubParsersAction) -> None:
    stack_env.register(commands)
    layout_cmd.register(commands)
    job_cmd.register(commands)
    doctor.register(commands)

"""Where a job runs: the stack's URLs, the output folder, the sandbox kind. A module of its own, without the
trainer's imports, so that `veri eval` refuses bad input before torch and TRL load."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TrainOptions:
    proxy_url: str  # the capture proxy's control routes, as the trainer reaches them
    policy_urls: list[str]  # hf: the one server (its /update_weights); vllm: every server of the plan
    output_root: Path
    job_name: str
    sandbox: str = "local"  # local | docker (in this process) | launcher (the launcher service)
    image: str | None = None  # docker, launcher: the harness bundle's image
    launcher_url: str | None = None  # launcher: the service's URL (it writes outputs where this process reads)
    control_token: str | None = None
    resume: bool = False
    # vLLM sync (filesystem and nccl): a server that has not loaded the weights by then fails the step.
    weight_sync_timeout_s: float = 600.0
    metrics_port: int | None = None  # `GET /metrics` for Prometheus while the job runs (None: off)
    metrics_host: str = "127.0.0.1"
    # A Harbor dataset's tasks as the job's start resolved them (tools/tasks/job.py): LaunchSettings.harbor_tasks
    harbor_tasks: dict[str, dict[str, Any]] = field(default_factory=dict)

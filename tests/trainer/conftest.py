"""Trainer fixtures: a policy server teacher-forced by rule (test-only scripted replies) so the random tiny
model calls the tool and then answers differently per rollout, and a real capture proxy in front of it.
The job they serve (its harness bundle, tasks and reward) is testkit/trainer_jobs.py, which bench/ runs too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.servers import RunningServer, start_server
from testkit.trainer_jobs import MAX_TOKENS, SCRIPT


@pytest.fixture(scope="session")
def trainer_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trainer-policy") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


@pytest.fixture
def stack(tiny_model: Path, trainer_script: Path, tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    """A fresh policy server (version 0) and a capture proxy in front of it: (policy, proxy)."""
    policy_args = ["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(trainer_script),
                   "--threads", "1"]
    with start_server(policy_args) as policy:
        proxy_args = ["serve", "proxy", "--policy-url", policy.url, "--model", str(tiny_model),
                      "--store", str(tmp_path / "spans"), "--max-tokens", str(MAX_TOKENS)]
        with start_server(proxy_args) as proxy:
            yield policy, proxy


def build_rollouts(config, proxy_url: str, tokenizer, archive, scorer, outputs: Path, *, served=None):
    """The rollout function the job builds, over the local backend (`config`: a loaded JobConfig)."""
    from veri.core.dataset import read_dataset
    from veri.loop.collect.collect import GroupCollector, LaunchSettings
    from veri.loop.collect.runner import BackendRunner
    from veri.services.launcher.local import LocalBackend
    from veri.services.proxy.control_client import ControlClient
    from veri.services.trainer.grpo.rollout_func import HarnessRollouts
    from veri.services.trainer.grpo.rows import MaskedRow
    from veri.services.trainer.ui.progress import StepProgress
    from veri.services.trainer.weights.sync import PolicyVersions

    settings = LaunchSettings(image=str(config.harness_bundle), model_name="policy", max_turns=4, timeout_s=60,
                              max_parallel=4)
    control = ControlClient(proxy_url)
    collector = GroupCollector(control, BackendRunner(LocalBackend(), outputs), settings,
                               max_response_length=config.max_response_length, decoder=tokenizer)
    return HarnessRollouts(
        tasks=read_dataset(config.dataset), collector=collector, scorer=scorer, archive=archive,
        progress=StepProgress(archive), versions=PolicyVersions(),
        masked=MaskedRow(pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id), max_parallel_rollouts=4,
        served=served,
    )

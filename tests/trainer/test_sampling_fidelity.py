"""The job's sampling is the whole sampling (core/sampling.py), on the hf backend: a model whose
generation_config.json recommends top_k, min_p, a repetition penalty, its own temperature and top_p is
sampled at the job's temperature alone, so at step 0 (the trainer's weights are the sampler's) TRL's
importance ratio is 1 and the trainer's logprob of every trained token is the captured one. And
`veri train` refuses a proxy that samples otherwise. (The vLLM twin: tests/stack/test_train_vllm.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from testkit.servers import RunningServer, start_server
from testkit.trainer_jobs import MAX_TOKENS, write_job
from tests.models.generation_defaults import HOSTILE, with_generation_defaults
from tests.trainer.test_train import veri_train
from veri.archive import ArchiveIndex, read_metrics

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]

# Measured on the 2-core dev box: the largest |trainer - sampler| logprob over the trained tokens is ~1e-6
# nats (both float32 on CPU; the server decodes with a KV cache, the trainer in one padded pass).
LOGP_BOUND = 1e-4


@pytest.fixture(scope="module")
def hostile_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return with_generation_defaults(tiny_model, tmp_path_factory.mktemp("models") / "tiny-defaults")


@pytest.fixture
def sampling_stack(hostile_model: Path, tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    """The hf policy on the model as it is (no scripted replies: every token sampled), and a proxy at the
    job's sampling: (policy, proxy)."""
    with start_server(["serve", "policy", "--model", str(hostile_model), "--threads", "1"]) as policy:
        with start_server(["serve", "proxy", "--policy-url", policy.url, "--model", str(hostile_model),
                           "--store", str(tmp_path / "spans"), "--max-tokens", str(MAX_TOKENS)]) as proxy:
            yield policy, proxy


def test_the_model_s_generation_defaults_never_apply_on_hf(sampling_stack, hostile_model, tmp_path):
    job = write_job(tmp_path / "job", hostile_model, max_steps=1)
    result = veri_train(job, sampling_stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    (line,) = read_metrics(tmp_path / "jobs" / "job" / "metrics.jsonl")
    # TRL's own figures over the trained tokens: the trainer scores what the policy sampled, at equal weights.
    assert line["train/sampling/sampling_logp_difference/max"] <= LOGP_BOUND, line
    for bound in ("min", "max"):
        assert abs(line[f"train/sampling/importance_sampling_ratio/{bound}"] - 1.0) <= LOGP_BOUND, line
    # ...and the policy did not sample from the top 3 (a server that applied top_k but reported untruncated
    # logprobs would pass the figures above): the tiny random model's distribution is all but flat.
    ranks = sampled_ranks(hostile_model, tmp_path / "jobs" / "job")
    assert len(ranks) >= 40 and sum(rank >= HOSTILE["top_k"] for rank in ranks) / len(ranks) > 0.9, ranks


def sampled_ranks(model_dir: Path, job_dir: Path) -> list[int]:
    """Each sampled token's rank under the model (0: its most likely token), over every span of the job."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ranks = []
    with ArchiveIndex(job_dir) as index:
        spans = [span for row in index.rollouts(limit=100) for span in index.read_rollout(row["path"]).spans]
    for span in spans:
        ids = torch.tensor([span.prompt_token_ids + span.completion_token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(span.prompt_token_ids) - 1 : -1]
        chosen = logits.gather(1, torch.tensor(span.completion_token_ids)[:, None])
        ranks += (logits > chosen).sum(dim=1).tolist()
    return ranks


def test_train_refuses_a_proxy_that_samples_otherwise(stack, tiny_model, tmp_path):
    """The stack's proxy samples at temperature 1 with 24 tokens a call; a job at 0.7 would have every span
    scored at the wrong temperature: refused at start, naming the fix, before anything is archived."""
    job = write_job(tmp_path / "job", tiny_model, sampling={"temperature": 0.7, "max_tokens": MAX_TOKENS})
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "the capture proxy samples with temperature 1 (wanted 0.7)" in result.stderr
    assert "--temperature 0.7 --top-p 1 --max-tokens 24" in result.stderr and "make down" in result.stderr
    assert not (tmp_path / "jobs" / "job").exists()

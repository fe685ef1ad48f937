"""Does the trainer score what the policy sampled? Per policy backend, on the CPU demo's model and job.

    python bench/sampling_fidelity.py [--model build/models/smollm2] [--backends hf,vllm]      (make bench-fidelity)

For each backend (hf: `veri serve policy`; vllm: `vllm serve` in <IMAGE_PREFIX>/vllm-cpu with the flags
veri's stack starts it with, skipped when the image is missing) the policy server runs the model, and
veri's own PolicyClient (the capture proxy's exact request: the job's temperature and max_tokens, every
other sampling field neutral: core/sampling.py) samples `--samples` completions for each of `--tasks`
tasks of the CPU demo (config/url_extract_cpu.yaml: its dataset, prompt and system prompt, as the
url_extract_inline harness sends them). Then one trainer, the demo's as `veri train` builds it
(grpo_config_kwargs, build_trainer, the hf seat for TRL's correction; micro-batches of the demo's 8 rows,
one optimizer step over every backend's samples), scores them all with TRL's own code
(`_generate_and_score_completions`: its old_per_token_logps against the captured
sampling_per_token_logps, over the completion mask), each backend's rows apart:

  staleness 0   the trainer's weights are the sampler's: the logprob difference |trainer - sampler|
                (mean, p99, max) and the importance ratio exp(trainer - sampler) (p1, median, p99)
  staleness 1   after one GRPO optimizer step on all the samples (the demo's learning rate, its rewards:
                the exact URL and the closeness), the trainer scores what the previous version drew:
                the ratio the asynchronous loop applies to a one-version-old group (untruncated, and the
                fraction of tokens the importance_sampling_cap truncates)

Library noise goes to build/bench/fidelity-libraries.log. Figures: docs/benchmarks.md; 8-10 min on the
2-core dev box (+1 min the first time, converting SmolLM2), 4.5 GB of memory at its peak.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import free_port, start_server
from veri.core import sampling
from veri.core.config import JobConfig, parse_config, read_config_file
from veri.core.dataset import read_dataset
from veri.services.proxy.policy_client import PolicyClient
from veri.tools.appliance.policy_compose import CPU_ENV, CPU_FLAGS, TRL_SERVER_FLAGS

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "url_extract_cpu.yaml"
HARNESS = REPO / "harness-bundles" / "url_extract_inline" / "agent.py"
REWARDS = REPO / "config" / "rewards" / "url_extract.py"


@dataclass
class Samples:
    prompts: list[list[int]]  # per task
    rows: dict[int, list[tuple[list[int], list[float], str]]]  # task -> (completion ids, logprobs, text) x G
    seconds: float


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "build" / "models" / "smollm2")
    parser.add_argument("--backends", default="hf,vllm")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=None, help="per task (default: the job's rollouts_per_prompt)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    model = ensure_model(args.model)
    config = parse_config(read_config_file(CONFIG), base_dir=REPO).model_copy(update={"model": model})
    group = args.samples or config.rollouts_per_prompt
    tasks = read_dataset(config.dataset)[: args.tasks]
    print(f"sampling fidelity: {model.name}, {len(tasks)} tasks x {group} samples, temperature"
          f" {config.sampling.temperature:g}, max_tokens {config.max_tokens_per_call}, learning rate"
          f" {config.learning_rate:g}, cap {config.importance_sampling_cap:g}", flush=True)
    drawn = {}
    for backend in args.backends.split(","):
        with policy_server(backend, model) as url:
            if url is not None:
                drawn[backend] = draw(url, model, config, tasks, group)
                print(f"{backend}: {len(tasks) * group} samples in {drawn[backend].seconds:.0f} s", flush=True)
    log = REPO / "build" / "bench" / "fidelity-libraries.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    from veri.infra.quiet import quiet_libraries

    with quiet_libraries(log):
        figures = score(config, tasks, drawn, group)
    for backend, found in figures.items():
        print_backend(backend, found)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    return 0


def ensure_model(path: Path) -> Path:
    if not (path / "config.json").is_file():
        from veri.tools.models.smollm2 import convert_smollm2

        print(f"building {path} (veri model smollm2)", flush=True)
        convert_smollm2(path)
    return path.resolve()


@contextlib.contextmanager
def policy_server(backend: str, model: Path) -> Iterator[str | None]:
    if backend == "hf":
        with start_server(["serve", "policy", "--model", str(model)]) as server:
            yield server.url
    elif backend == "vllm":
        with vllm_cpu(model) as url:
            yield url
    else:
        raise SystemExit(f"--backends: {backend!r} is not hf or vllm")


@contextlib.contextmanager
def vllm_cpu(model: Path) -> Iterator[str | None]:
    """`vllm serve` as veri's stack runs the CPU twin (appliance/policy_compose.py), published on 127.0.0.1."""
    import docker

    image = f"{os.environ.get('IMAGE_PREFIX') or 'veri'}/vllm-cpu"
    try:
        client = docker.from_env(timeout=300)
        client.images.get(image)
    except docker.errors.ImageNotFound:
        print(f"vllm: skipped (no image {image}: make images-vllm-cpu)")
        yield None
        return
    except docker.errors.DockerException as error:
        print(f"vllm: skipped (no Docker daemon: {error})")
        yield None
        return
    port = free_port()
    command = ["vllm", "serve", "/model", "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "2048",
               *TRL_SERVER_FLAGS, *sampling.SERVER_FLAGS, *CPU_FLAGS]
    container = client.containers.run(image, command, detach=True, shm_size="1g", environment=CPU_ENV,
                                      volumes={str(model): {"bind": "/model", "mode": "ro"}},
                                      ports={"8000/tcp": ("127.0.0.1", port)}, labels={"org.veri.bench": "fidelity"})
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        while True:
            container.reload()
            if container.status == "exited" or time.monotonic() - started > 600:
                raise SystemExit(f"vllm serve did not start:\n{container.logs(tail=40).decode(errors='replace')}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(1)
        print(f"vllm: {image} up in {time.monotonic() - started:.0f} s", flush=True)
        yield url
    finally:
        container.remove(force=True)
        client.close()


def draw(url: str, model: Path, config: JobConfig, tasks: list[dict[str, Any]], group: int) -> Samples:
    """`group` samples per task through veri's policy client, all in flight at once (the server batches)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    harness = _module(HARNESS)
    prompts = [tokenizer.apply_chat_template(harness.messages_for(json.dumps(task["prompt"])),
                                             add_generation_prompt=True, tokenize=True, return_dict=False)
               for task in tasks]
    stop = [tokenizer.eos_token_id]

    async def run() -> list[Any]:
        client = PolicyClient(url, model=None, timeout_s=600)
        await client.start()
        try:
            calls = [client.complete(prompt, max_tokens=config.max_tokens_per_call,
                                     temperature=config.sampling.temperature, top_p=config.sampling.top_p,
                                     stop_token_ids=stop) for prompt in prompts for _ in range(group)]
            return list(await asyncio.gather(*calls))
        finally:
            await client.aclose()

    started = time.monotonic()
    completions = asyncio.run(run())
    seconds = time.monotonic() - started
    rows: dict[int, list[tuple[list[int], list[float], str]]] = {}
    for n, completion in enumerate(completions):
        text = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        rows.setdefault(n // group, []).append((completion.token_ids, completion.logprobs, text))
    return Samples(prompts, rows, seconds)


def score(config: JobConfig, tasks: list[dict[str, Any]], drawn: dict[str, Samples], group: int) -> dict[str, Any]:
    """TRL's trainer logprobs of every backend's drawn tokens at version 0 and, after one step on them all,
    at version 1. Task key k is backend k // len(tasks)'s task k % len(tasks)."""
    from transformers import AutoTokenizer
    from transformers.trainer_callback import ProgressCallback

    from veri.loop.rewards import RewardFunction
    from veri.services.trainer.grpo.rewards import trl_reward_funcs
    from veri.services.trainer.grpo.setup import build_trainer, grpo_config_kwargs, seat_weight_sync
    from veri.services.trainer.grpo.trl_internals import generation_batch
    from veri.services.trainer.schedule.tasks import task_index, task_key, trl_dataset
    from veri.services.trainer.weights.sync import PushedAfterEachStep

    demo = _module(REWARDS)
    functions = [RewardFunction.wrap("reward", demo.reward), RewardFunction.wrap("closeness", demo.closeness, 0.5)]
    funcs, weights = trl_reward_funcs(functions)
    backends = list(drawn)
    keys = len(tasks) * len(backends)
    micro = config.grpo.get("per_device_train_batch_size", 8)  # the demo's micro-batch: 8 rows
    job = config.model_copy(update={"max_steps": 1, "grpo": {
        **config.grpo, "per_device_train_batch_size": micro, "gradient_accumulation_steps": keys * group // micro,
        "save_steps": 1000, "logging_steps": 1000}})
    taken: dict[int, int] = {}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """The drawn samples, whatever order TRL asks for the keys in: each key's next one."""
        out: dict[str, list[Any]] = {key: [] for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                          "veri_rewards")}
        for key in prompts:
            index = task_index(key)
            nth = taken.get(index, 0)
            taken[index] = nth + 1
            samples, task = drawn[backends[index // len(tasks)]], index % len(tasks)
            ids, logprobs, text = samples.rows[task][nth % group]
            expected = [tasks[task]["expected_url"]]
            out["prompt_ids"].append(samples.prompts[task])
            out["completion_ids"].append(ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append([1] * len(ids))
            out["veri_rewards"].append({"reward": demo.reward(None, [text], expected)[0],
                                        "closeness": demo.closeness(None, [text], expected)[0]})
        return out

    tokenizer = AutoTokenizer.from_pretrained(config.model)
    with tempfile.TemporaryDirectory() as scratch:
        args = grpo_config_kwargs(job, output_dir=Path(scratch), reward_weights=weights)
        trainer = build_trainer(job, args=args, tokenizer=tokenizer, dataset=trl_dataset(tasks * len(backends)),
                                rollout_func=rollout_func, reward_funcs=funcs, callbacks=[])
        seat_weight_sync(trainer, PushedAfterEachStep())  # what `veri train` does for hf: TRL's correction runs
        trainer.remove_callback(ProgressCallback)  # its bar and log dict are noise here; the figures follow
        trainer.model.train()
        batch = [{"prompt": task_key(key)} for key in range(keys) for _ in range(group)]
        started = time.monotonic()
        fresh = generation_batch(trainer, batch)
        trainer.train()  # one optimizer step on the same samples: version 1
        trainer.model.train()
        stale = generation_batch(trainer, batch)
        seconds = time.monotonic() - started
    cap, rows = config.importance_sampling_cap, len(tasks) * group
    figures = {}
    for n, backend in enumerate(backends):
        at_0, at_1 = _gaps(fresh, n * rows, rows), _gaps(stale, n * rows, rows)
        figures[backend] = {"tokens": at_0.numel(), "sampling_s": round(drawn[backend].seconds, 1),
                            "trainer_s": round(seconds, 1),
                            "staleness_0": {**_differences(at_0), **_ratios(at_0, cap)},
                            "staleness_1": {**_differences(at_1), **_ratios(at_1, cap)}}
    return figures


def _gaps(batch: dict[str, Any], first: int, rows: int) -> torch.Tensor:
    """trainer - sampler logprob of each scored token of rows first.. (TRL's own tensors and completion mask)."""
    part = slice(first, first + rows)
    mask = batch["completion_mask"][part].bool()
    return (batch["old_per_token_logps"][part] - batch["sampling_per_token_logps"][part])[mask].double()


def _differences(gaps: torch.Tensor) -> dict[str, float]:
    size = gaps.abs()
    return {"logp_diff_mean": size.mean().item(), "logp_diff_p99": size.quantile(0.99).item(),
            "logp_diff_max": size.max().item()}


def _ratios(gaps: torch.Tensor, cap: float) -> dict[str, float]:
    ratio = gaps.exp()
    quantiles = ratio.quantile(torch.tensor([0.01, 0.5, 0.99], dtype=torch.float64)).tolist()
    return {"ratio_min": ratio.min().item(), "ratio_p1": quantiles[0], "ratio_p50": quantiles[1],
            "ratio_p99": quantiles[2], "ratio_max": ratio.max().item(),
            "truncated_frac": (ratio > cap).double().mean().item()}


def print_backend(backend: str, figures: dict[str, Any]) -> None:
    print(f"\n{backend}: {figures['tokens']} tokens scored (sampling {figures['sampling_s']} s; the trainer,"
          f" every backend's rows: {figures['trainer_s']} s)")
    print("  staleness | |trainer - sampler| logprob: mean   p99      max      | ratio: min      p1       median"
          "   p99      max      | > cap")
    for lag in (0, 1):
        f = figures[f"staleness_{lag}"]
        print(f"  {lag:>9} | {f['logp_diff_mean']:>35.2e} {f['logp_diff_p99']:>8.2e} {f['logp_diff_max']:>8.2e} |"
              f" {f['ratio_min']:>13.5f} {f['ratio_p1']:>8.5f} {f['ratio_p50']:>8.5f} {f['ratio_p99']:>8.5f}"
              f" {f['ratio_max']:>8.5f} | {f['truncated_frac']:.4f}", flush=True)


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main())

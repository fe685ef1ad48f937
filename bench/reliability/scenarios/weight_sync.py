"""Weight syncs while sessions are calling (docs/reliability.md, "The scenarios"): no span carries the wrong
policy version.

A real proxy in front of a real hf policy (the tiny model). While S sessions make chained calls
(proxy_load's driver), new weights are pushed `syncs` times (`POST /update_weights` naming the version,
as the trainer's `HfWeightSync` does), each at a set share of the calls answered, so calls are in flight
at every push. Every version's weights are made distinct (seeded noise on every parameter), so which
weights sampled a span can be told from its logprobs: each span's completion is scored under every
version, and the version whose logprobs match must be the one the span carries.

Pass: every span attributed to the version stamped on it (and every version served some spans), every
call answered (a call that meets a sync waits in the batcher's queue: the running rows finish under
the old weights, the update is applied with no row in the batch, then the queue is admitted), spans
counted as in proxy_load. `tests/proxy/test_sync_safety.py` runs it with 64 sessions, CI-sized calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import torch

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:  # run by bench/reliability/run.py, not from the repo root
    sys.path.insert(0, str(REPO))

from bench.reliability.scenarios.proxy_load import LoadResult, counted, drive, load_stack, tiny_model  # noqa: E402
from veri.core.records import Span  # noqa: E402
from veri.services.proxy.control_client import ControlClient  # noqa: E402

NAME = "weight_sync"

NOISE_STD = 0.2  # per parameter, per version: enough to move every logprob far past float rounding
MATCH_TOLERANCE = 1e-3  # batched vs single-row forward passes agree to ~1e-5 in float32


def write_versions(model_dir: Path, folder: Path, versions: int) -> list[Path]:
    """`<folder>/step-<v>/model.safetensors` for v in 1..versions, each the model plus its own noise."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one bar per load is noise in the scenario's output

    paths = []
    for version in range(1, versions + 1):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        generator = torch.Generator().manual_seed(version)
        with torch.no_grad():
            for parameter in model.parameters():  # tied tensors are one parameter: they stay tied
                parameter.add_(torch.randn(parameter.shape, generator=generator) * NOISE_STD)
        path = folder / f"step-{version}" / "model.safetensors"
        path.parent.mkdir(parents=True)
        save_model(model, str(path))
        paths.append(path)
    return paths


class VersionScorer:
    """Scores a span's completion under each version's weights (version 0: the model folder's)."""

    def __init__(self, model_dir: Path, weights: list[Path]) -> None:
        from safetensors.torch import load_model
        from transformers import AutoModelForCausalLM

        self.models = []
        for path in [None, *weights]:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
            if path is not None:
                load_model(model, str(path))
            self.models.append(model)

    @torch.no_grad()
    def distances(self, span: Span) -> list[float]:
        """Per version: the largest gap between the span's logprobs and that version's."""
        ids = torch.tensor([span.prompt_token_ids + span.completion_token_ids])
        start, completion = len(span.prompt_token_ids), torch.tensor(span.completion_token_ids)
        gaps = []
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny forward: on a busy box, intra-op threads spin 30x slower than one
        try:
            for model in self.models:
                logits = model(input_ids=ids).logits[0, start - 1 : -1]
                logprobs = torch.log_softmax(logits.float(), dim=-1)[torch.arange(len(completion)), completion]
                gaps.append(float((logprobs - torch.tensor(span.completion_logprobs)).abs().max()))
        finally:
            torch.set_num_threads(threads)
        return gaps


def attribution_problems(scorer: VersionScorer, spans: list[Span]) -> tuple[list[str], dict[int, int]]:
    """(spans whose logprobs are not their stamped version's, spans per attributed version)."""
    problems, served = [], dict.fromkeys(range(len(scorer.models)), 0)
    for span in spans:
        gaps = scorer.distances(span)
        sampled_by = min(range(len(gaps)), key=gaps.__getitem__)
        if gaps[sampled_by] > MATCH_TOLERANCE:
            problems.append(f"{span.rollout_id}#{span.request_index}: its logprobs match no version's"
                            f" (closest {sampled_by}, {gaps[sampled_by]:.2g} apart)")
            continue
        served[sampled_by] += 1
        if sampled_by != span.policy_version:
            problems.append(f"{span.rollout_id}#{span.request_index}: sampled by version {sampled_by}, stamped"
                            f" {span.policy_version}")
    return problems, served


def push(policy_url: str, path: Path, version: int) -> float:
    """`POST /update_weights` as the trainer sends it; returns the seconds it took."""
    started = time.monotonic()
    reply = httpx.post(f"{policy_url}/update_weights", json={"path": str(path), "policy_version": version},
                       timeout=600)
    if reply.status_code != 200 or reply.json().get("policy_version") != version:
        raise RuntimeError(f"the policy answered {reply.status_code} {reply.text[:300]} to version {version}")
    return time.monotonic() - started


def sync_under_load(policy_url: str, control: ControlClient, weights: list[Path], *, sessions: int,
                    calls: int) -> tuple[LoadResult, list[tuple[float, float]]]:
    """Drive the sessions in a thread; push version i+1 once (i+1)/(len(weights)+1) of the calls are
    answered. Returns the load and each push's (start, end) in unix time."""
    result = LoadResult(sessions=[control.open_session() for _ in range(sessions)])
    driver = threading.Thread(target=lambda: asyncio.run(drive(result.sessions, calls, result)), daemon=True)
    driver.start()
    pushes, total = [], sessions * calls
    for version, path in enumerate(weights, start=1):
        while driver.is_alive() and len(result.latencies_s) < total * version / (len(weights) + 1):
            time.sleep(0.01)
        started = time.time()
        push(policy_url, path, version)
        pushes.append((started, time.time()))
    driver.join()
    return result, pushes


@contextlib.contextmanager
def versions_folder(model: Path, syncs: int) -> Iterator[list[Path]]:
    with tempfile.TemporaryDirectory(prefix="veri-weight-sync-") as folder:
        yield write_versions(model, Path(folder), syncs)


def check(model: Path, *, sessions: int, calls: int, syncs: int) -> dict[str, Any]:
    """The whole check on a fresh stack: runs, spans lost, 5xx, problems, notes."""
    with versions_folder(model, syncs) as weights, load_stack(model) as (url, policy_url, _):
        control = ControlClient(url, timeout_s=120)
        result, pushes = sync_under_load(policy_url, control, weights, sessions=sessions, calls=calls)
        spans = [span for session in result.sessions for span in control.spans(session.rollout_id)]
        lost, problems = counted(control, result, calls, set(range(syncs + 1)))
        scorer = VersionScorer(model, weights)
    wrong, served = attribution_problems(scorer, spans)
    problems = result.failures[:5] + problems + wrong
    unserved = [version for version, count in served.items() if count == 0]
    if unserved:
        problems.append(f"versions {unserved} sampled no span: the pushes missed the load (nothing was tested)")
    straddling = sum(any(span.started_at < end and span.started_at + span.duration_s > start
                         for start, end in pushes) for span in spans)
    pushed = ", ".join(f"{end - start:.2f}" for start, end in pushes)
    per_version = [served[v] for v in sorted(served)]
    per_version = [served[v] for v in sorted(served)]
    notes = [f"{sessions}x{calls} calls, {syncs} syncs ({pushed} s each) under load: spans per version {per_version},"
             f" {straddling} calls overlapped a sync, {len(wrong)} misattributed"]
    return {"runs": sessions, "spans_lost": lost, "5xx": result.server_errors, "problems": problems, "notes": notes}


def run(quick: bool) -> dict:
    sessions, calls, syncs = (16, 5, 3) if quick else (64, 20, 5)
    found = check(tiny_model(), sessions=sessions, calls=calls, syncs=syncs)
    problems = found["problems"]
    return {"scenario": NAME, "runs": found["runs"], "outcome": "fail" if problems else "pass",
            "spans_lost": found["spans_lost"], "5xx": found["5xx"], "escapes": 0,
            "notes": "; ".join(found["notes"] + problems[:5])}


if __name__ == "__main__":
    print(orjson.dumps(run(quick="--quick" in sys.argv), option=orjson.OPT_INDENT_2).decode())

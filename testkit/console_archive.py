"""A real job archive for the console tests, written through the trainer's own `JobArchive` (rollout
records with real episodes built by `core.episodes`, metrics from `step_metrics`, job.json, train.log),
with token ids from the tiny model's tokenizer so the token view decodes them."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from testkit.spans import make_span
from veri.archive import JobArchive, step_metrics
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import LaunchResult
from veri.core.records import Span, ToolCallFailure, ToolCallParseFailure
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.core.rules import Rule, Verdict
from veri.loop.collect.collect import CollectedRollout
from veri.services.trainer.timeline.recorder import StepTimeline

TIMINGS = {"rollout": 2.0, "reward": 0.5, "train": 1.0, "weight_sync": 0.25}


class Tokens:
    def __init__(self, model: Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))

    def __call__(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids


def tool_rollout(tok: Tokens, task: int, index: int, answer: str, version: int) -> list[Span]:
    """Two bridged calls: a tool call, its result (environment tokens), the final answer."""
    question = [{"role": "user", "content": f"Find the link on page {task}."}]
    call = {"id": "call_1", "type": "function", "function": {"name": "fetch", "arguments": f'{{"page": {task}}}'}}
    first_prompt = tok(f"user: Find the link on page {task}.\nassistant:")
    first = make_span(0, first_prompt, tok(" fetch(page)"), version=version, messages=question)
    first.reply_message = {"role": "assistant", "content": None, "tool_calls": [call]}
    tool_result = {"role": "tool", "tool_call_id": "call_1", "content": f"<a href='https://site.test/{task}'>"}
    second_prompt = [*first.prompt_token_ids, *first.completion_token_ids, *tok("\ntool: <a href=x>\nassistant:")]
    second = make_span(1, second_prompt, tok(f" {answer}"), bridged_from=0, version=version,
                       messages=[*question, first.reply_message, tool_result], reply=answer)
    return [first, second]


def rewritten_rollout(tok: Tokens, version: int) -> list[Span]:
    """The harness edited its history: the second call's prompt is not the first's prompt + completion."""
    first = make_span(0, tok("system: be brief\nuser: hi\nassistant:"), tok(" hello"), version=version)
    second = make_span(1, tok("system: be short\nuser: hi\nassistant: hello\nuser: answer?\nassistant:"),
                       tok(" The URL is https://site.test/9"), version=version, reply="The URL is https://site.test/9")
    return [first, second]


def with_failed_tool_call(spans: list[Span]) -> list[Span]:
    """The first call's reply also held a tool call that did not parse (the harness got it as text), and the
    client retried that call once before it left a span and re-sent it once after."""
    spans[0].tool_call_failures = [ToolCallParseFailure(
        kind=ToolCallFailure.INVALID_JSON, name="fetch", raw='<tool_call>{"name": "fetch", "arguments": {page: 0}',
        sent_as="text")]
    spans[0].client_retry_count = 1
    spans[0].retried_at = [spans[0].started_at + 30.0]
    return spans


def record(task: int, index: int, spans: list[Span], *, reward: float | None = None, status=RolloutStatus.COMPLETED,
           reward_error: bool = False) -> RolloutRecord:
    exit_code = {RolloutStatus.COMPLETED: 0, RolloutStatus.FAILED: 1}.get(status)
    outcome = None
    if reward_error:
        outcome = RewardOutcome(reward=None, per_function={"match": None},
                                verdicts=[Verdict.of(Rule.REWARD_ERROR, "reward 'match' raised KeyError('url')")])
    elif reward is not None:
        outcome = RewardOutcome(reward=reward, per_function={"match": reward})
    return RolloutRecord(
        rollout_id=f"r-{task}-{index}", task_index=task, rollout_index=index,
        task={"prompt": f"Find the link on page {task}.", "expected_url": f"https://site.test/{task}"},
        status=status, exit_code=exit_code, spans=spans, episode=build_episode(spans, status, exit_code=exit_code),
        reward=outcome,
    )


def step_records(tok: Tokens, step: int) -> list[RolloutRecord]:
    return [
        record(0, 0, tool_rollout(tok, 0, 0, "The URL is https://site.test/0", step), reward=1.0),
        record(0, 1, with_failed_tool_call(tool_rollout(tok, 0, 1, f"I could not find it (step {step})", step)),
               reward=0.0),
        record(1, 0, rewritten_rollout(tok, step), reward=0.5),  # a rewritten system prompt: two rows, trained
        record(1, 1, tool_rollout(tok, 1, 1, "crash", step), status=RolloutStatus.FAILED),  # masked
        record(2, 0, tool_rollout(tok, 2, 0, "The URL is https://site.test/2", step), reward_error=True),  # masked
        record(2, 1, [], status=RolloutStatus.TRUNCATED),  # no_spans + harness_timeout
    ]


def write_timeline(archive: JobArchive, step: int, records: list[RolloutRecord]) -> dict[str, float]:
    """The step's timeline line through the trainer's recorder, on a made-up clock: each rollout's sandbox
    starts 0.2 s after the previous one, its calls (1 s each, on replica 0 or 1) 2 s apart, then scoring,
    forward/backward, the optimizer and the sync. Returns the utilisation figures for the metrics line."""
    base, now = 1000.0 + 100 * step, [0.0]
    timeline = StepTimeline(archive.write_timeline, clock=lambda: base + now[0])
    timeline.step_begin()
    collected = []
    for i, item in enumerate(records):
        spans = [span.model_copy(update={"started_at": base + 1 + 0.5 * i + 2 * k, "duration_s": 1.0,
                                         "replica": i % 2}) for k, span in enumerate(item.spans)]
        launch = LaunchResult(rollout_id=item.rollout_id, status=item.status, started_at=base + 0.2 * i,
                              duration_s=6.0)
        collected.append(CollectedRollout(item.model_copy(update={"spans": spans}), launch))
    timeline.collected(collected)
    for at, then in ((8.0, lambda: timeline.rollouts(collected, scoring_s=1.0, dropped=set())),
                     (10.0, timeline.before_optimizer), (10.5, timeline.after_optimizer),
                     (11.5, lambda: timeline.timed("weight_sync", 1.0)), (12.0, lambda: None)):
        now[0] = at
        then()
    return timeline.finish(step)


def write_job(root: Path, name: str, model: Path, steps: int = 2) -> JobArchive:
    """An open archive with `steps` completed steps (close it, or use it as a context manager, to finish)."""
    tok = Tokens(model)
    archive = JobArchive(root, name)
    archive.start_job(model=str(model), max_steps=steps + 1, config={"model": str(model), "max_steps": steps + 1})
    archive.log(f"job {name}: backend hf, sandbox local")
    for step in range(steps):
        records = step_records(tok, step)
        for item in records:
            log = f"--- stdout (tail) ---\nstep {step} task {item.task_index}\n--- stderr (tail) ---\n"
            archive.write_rollout(step, item, harness_log=log)
        figures = write_timeline(archive, step, records)
        archive.write_step_metrics(step, step_metrics(records, TIMINGS) | figures)
        archive.log(f"step {step}: reward mean {sum(r.reward.reward or 0 for r in records if r.reward) / 6:.2f}")
    return archive

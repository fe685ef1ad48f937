"""Re-record the checked-in recordings (tests/replay/recordings/) from real runs.

    .venv/bin/python -m testkit.record_demos [NAME ...]     (names: see DEMOS; default: all)

Starts what tests/demo/ starts (the web fixture, `veri serve policy` on the tiny model with scripted
replies, `veri serve proxy --record-requests`), runs each harness unmodified against it (the demo
bundles as subprocesses with the rollout environment, with the real `claude` and `codex` binaries; the
Anthropic SDK and the OpenAI SDK's Responses API in this process), then writes each rollout with `record_rollout`
(what `veri replay record` does).
Run it when a change to rendering, bridging or masking is intended, and commit the new files with
the change. Needs `make tiny-model` (or $VERI_TINY_MODEL) and, for Claude Code and Codex,
`make claude-code` and `make codex`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import anthropic
import openai

from testkit.demo import (
    CLAUDE_PAGE,
    CODEX_PAGE,
    OPENAI_PAGE,
    SUB_AGENT_PAGE,
    answer_rule,
    fetch_rule,
    run_bundle,
    sub_agent_rules,
    tool_call,
)
from testkit.proxy_script import SCRIPT, fake_weather, proxy_args
from testkit.servers import RunningServer, start_server
from veri.core.config import RewardConfig
from veri.core.episodes import RolloutStatus
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient
from veri.services.webfixture.inline_tasks import inline_task
from veri.services.webfixture.pages import task
from veri.tools.replay.recording import Recording, record_rollout

REPO = Path(__file__).resolve().parents[1]
RECORDINGS = REPO / "tests" / "replay" / "recordings"
URL_REWARD = REPO / "config/rewards/url_extract.py"
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def tiny_model() -> Path:
    path = Path(os.environ.get("VERI_TINY_MODEL", REPO / "build/models/tiny"))
    if not (path / "config.json").exists():
        sys.exit(f"no tiny model at {path}: run `make tiny-model` (or set VERI_TINY_MODEL)")
    return path.resolve()


def bundle_demo(bundle: str, row: dict, name: str | None = None
                ) -> Callable[[RunningServer, ControlClient, SessionInfo], Recording]:
    name = name or bundle

    def record(proxy: RunningServer, control: ControlClient, session: SessionInfo) -> Recording:
        with tempfile.TemporaryDirectory(prefix=f"record-{bundle}-") as folder:
            run = run_bundle(bundle, proxy=proxy, session=session, row=row, tmp_path=Path(folder))
            if run.returncode != 0:
                sys.exit(f"{bundle} failed, nothing recorded:\n{run.explain()}")
            return record_rollout(control, session.rollout_id, name=name, task=row,
                                  rewards=[RewardConfig(file=URL_REWARD, function="reward")],
                                  outputs=run.output_dir, status=RolloutStatus.COMPLETED, exit_code=0,
                                  note="python -m testkit.record_demos " + name)
    return record


def anthropic_tool_loop(session: SessionInfo) -> None:
    """The `anthropic` SDK's tool loop, streamed, with a count_tokens call first (no span)."""
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    client.messages.count_tokens(model="policy", tools=[WEATHER], messages=messages)
    for _ in range(4):
        with client.messages.stream(model="policy", max_tokens=256, tools=[WEATHER], messages=messages,
                                    system="You answer weather questions.") as stream:
            reply = stream.get_final_message()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason != "tool_use":
            return
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": fake_weather(b.input["city"])}
            for b in reply.content if b.type == "tool_use"]})
    raise RuntimeError("the Anthropic SDK tool loop did not finish: check the scripted replies")


def anthropic_sdk(proxy: RunningServer, control: ControlClient, session: SessionInfo) -> Recording:
    anthropic_tool_loop(session)
    return record_rollout(control, session.rollout_id, name="anthropic_sdk",
                          note="python -m testkit.record_demos anthropic_sdk")


def anthropic_compacting_loop(session: SessionInfo) -> None:
    """The `anthropic` SDK's tool loop that compacts its history, as Claude Code does when its context
    fills: with the last tool result it asks for a summary, then answers from a new history (the same
    system prompt, the summary) in place of the old one."""
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=0)
    system = "You answer weather questions."
    messages: list[dict] = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    for _ in range(3):
        reply = client.messages.create(model="policy", max_tokens=256, tools=[WEATHER], messages=messages,
                                       system=system)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        results: list[dict] = [{"type": "tool_result", "tool_use_id": b.id, "content": fake_weather(b.input["city"])}
                               for b in calls]
        if calls[0].input["city"] == "London":  # the context is "full": ask for a summary with the result
            results.append({"type": "text", "text": "Summarize the conversation so far for a fresh start"
                                                    " (it was sunny in Paris, rainy in London)."})
        messages.append({"role": "user", "content": results})
    summary = "".join(b.text for b in reply.content if b.type == "text")
    compacted = [{"role": "user", "content": f"Summary of the conversation so far: {summary} (the tools said:"
                                             " sunny in Paris, rainy in London). Now answer the user."}]
    client.messages.create(model="policy", max_tokens=256, tools=[WEATHER], messages=compacted, system=system)


def anthropic_compaction(proxy: RunningServer, control: ControlClient, session: SessionInfo) -> Recording:
    anthropic_compacting_loop(session)
    return record_rollout(control, session.rollout_id, name="anthropic_compaction",
                          note="python -m testkit.record_demos anthropic_compaction")


RESPONSES_WEATHER = {"type": "function", **{key: WEATHER[key] for key in ("name", "description")},
                     "parameters": WEATHER["input_schema"]}


def responses_tool_loop(session: SessionInfo) -> None:
    """The `openai` SDK's Responses API, streamed, each call chained to the last by previous_response_id
    (only the new function_call_output items sent), as the Agents SDK and Codex do."""
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
    request: dict = {"input": "What is the weather in Paris and London?"}
    for _ in range(4):
        with client.responses.stream(model="policy", tools=[RESPONSES_WEATHER], instructions="Use the tool.",
                                     **request) as events:
            reply = events.get_final_response()
        outputs = [{"type": "function_call_output", "call_id": item.call_id,
                    "output": fake_weather(json.loads(item.arguments)["city"])}
                   for item in reply.output if item.type == "function_call"]
        if not outputs:
            return
        request = {"input": outputs, "previous_response_id": reply.id}
    raise RuntimeError("the Responses tool loop did not finish: check the scripted replies")


def openai_responses(proxy: RunningServer, control: ControlClient, session: SessionInfo) -> Recording:
    responses_tool_loop(session)
    return record_rollout(control, session.rollout_id, name="openai_responses",
                          note="python -m testkit.record_demos openai_responses")


# Run by the trained-fraction bench (bench/trained_fraction.py), not recorded: one call, no tool.
BENCH_ONLY = ["url_extract_inline"]


def demo_recordings(names: list[str], model: Path) -> Iterator[tuple[str, Recording]]:
    """Start the web fixture, the scripted policy and the recording proxy, and run each named demo
    (all recorded ones when `names` is empty) against them: its name and its fresh recording, in turn."""
    with start_server(["serve", "webfixture"]) as webfixture, tempfile.TemporaryDirectory() as folder:
        openai_task, claude_task = task(OPENAI_PAGE, base=webfixture.url), task(CLAUDE_PAGE, base=webfixture.url)
        codex_task = task(CODEX_PAGE, base=webfixture.url)
        sub_agent_task = task(SUB_AGENT_PAGE, base=webfixture.url)
        demos = {
            "url_extract_openai": bundle_demo("url_extract_openai", openai_task),
            "url_extract_claude": bundle_demo("url_extract_claude", claude_task),
            "url_extract_codex": bundle_demo("url_extract_codex", codex_task),
            # Claude Code hands the task to a sub-agent (its Agent tool): two conversations, two rows.
            "claude_sub_agent": bundle_demo("url_extract_claude", sub_agent_task, name="claude_sub_agent"),
            "anthropic_sdk": anthropic_sdk,
            "anthropic_compaction": anthropic_compaction,
            "openai_responses": openai_responses,
            # The page in the prompt: answered by the OpenAI task's answer rule (the link is in the turn).
            "url_extract_inline": bundle_demo("url_extract_inline", inline_task(OPENAI_PAGE, base=webfixture.url)),
        }
        unknown = sorted(set(names) - set(demos))
        if unknown:
            sys.exit(f"unknown demos {unknown}: choose from {sorted(demos)}")
        rules = [*sub_agent_rules(sub_agent_task),
                 answer_rule(openai_task), answer_rule(claude_task), answer_rule(codex_task),
                 fetch_rule(openai_task, tool_call("fetch_url", {"url": openai_task["url"]})),
                 fetch_rule(claude_task, tool_call("Bash", {"command": f"curl -s {claude_task['url']}",
                                                            "description": "Fetch the page"})),
                 fetch_rule(codex_task, tool_call("exec_command", {"cmd": f"curl -s {codex_task['url']}"})),
                 *SCRIPT]
        script = Path(folder) / "script.json"
        script.write_text(json.dumps(rules))
        policy_cmd = ["serve", "policy", "--model", str(model), "--scripted-replies", str(script)]
        with start_server(policy_cmd) as policy:
            command = proxy_args(policy.url, model, Path(folder) / "spans", "--record-requests")
            command[command.index("--max-tokens") + 1] = "256"  # as tests/demo: room for a tool call
            with start_server(command) as proxy:
                control = ControlClient(proxy.url)
                for name in names or [name for name in demos if name not in BENCH_ONLY]:
                    yield name, demos[name](proxy, control, control.open_session())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="which recordings (default: all)")
    args = parser.parse_args()
    if bench_only := sorted(set(args.names) & set(BENCH_ONLY)):
        sys.exit(f"{bench_only} are not recorded (bench/trained_fraction.py runs them)")
    for name, recording in demo_recordings(args.names, tiny_model()):
        recording.save(RECORDINGS / f"{name}.jsonl")
        reward = recording.reward.reward if recording.reward else None
        print(f"{name}: {len(recording.requests)} requests, {len(recording.spans)} spans, reward {reward}")


if __name__ == "__main__":
    main()

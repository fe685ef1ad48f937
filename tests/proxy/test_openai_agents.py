"""The OpenAI Agents SDK (its default model: the Responses API) runs an agent with a function tool
against the capture proxy: plain, streamed, and chained by previous_response_id, each bridged."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI

from testkit.proxy_script import fake_weather
from tests.proxy.conftest import assert_bridged_chain
from tests.proxy.test_responses import ANSWER, QUESTION

pytestmark = pytest.mark.needs("process")


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return fake_weather(city)


def weather_agent(session) -> Agent:
    client = AsyncOpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
    return Agent(name="forecaster", instructions="Answer with the tool's help.", tools=[get_weather],
                 model=OpenAIResponsesModel(model="policy", openai_client=client))


async def run_agent(agent: Agent, *, stream: bool, chained: bool) -> str:
    options = {"run_config": RunConfig(tracing_disabled=True), "auto_previous_response_id": chained}
    if not stream:
        return (await Runner.run(agent, QUESTION, **options)).final_output
    result = Runner.run_streamed(agent, QUESTION, **options)
    kinds = {event.type async for event in result.stream_events()}
    assert "raw_response_event" in kinds
    return result.final_output


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("chained", [False, True], ids=["full-input", "previous-id"])
def test_agent_runs_a_three_turn_tool_loop_bridged(session, control, stream, chained):
    answer = asyncio.run(run_agent(weather_agent(session), stream=stream, chained=chained))
    assert answer == ANSWER
    spans = control.spans(session.rollout_id)
    assert [s.protocol for s in spans] == ["openai.responses"] * 3
    assert [bool(s.request.get("previous_response_id")) for s in spans] == [False, chained, chained]
    assert [s.request.get("stream", False) for s in spans] == [stream] * 3
    assert [call["function"]["name"] for s in spans[:2] for call in s.reply_message["tool_calls"]] == [
        "get_weather", "get_weather"]
    assert spans[2].messages[0] == {"role": "system", "content": "Answer with the tool's help."}
    assert [m["content"] for m in spans[2].messages if m["role"] == "tool"] == ["sunny in Paris", "rainy in London"]
    assert_bridged_chain(spans)

"""The scripted policy's rules the proxy tests (and the recordings, testkit/record_demos.py) run with, the
weather tool they call, and a capture proxy's arguments."""

from __future__ import annotations

from pathlib import Path

# Each rule: when the text of the prompt's last user turn contains `if_last_user_turn_contains`,
# the policy is teacher-forced to `reply` (logprobs stay the model's own for those tokens).
SCRIPT = [
    {"if_last_user_turn_contains": "rainy in London", "reply": "Paris is sunny and London is rainy."},
    {"if_last_user_turn_contains": "sunny in Paris",
     "reply": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "London"}}\n</tool_call>'},
    {"if_last_user_turn_contains": "weather in Paris and London",
     "reply": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'},
    {"if_last_user_turn_contains": "say stop", "reply": "Hello STOP world"},
    {"if_last_user_turn_contains": "think it over",
     "reply": "<think>\nThe user wants a plan.\n</think>\n\nPlan: none."},
    {"if_last_user_turn_contains": "veri-tool-ok",
     "reply": "The command printed veri-tool-ok."},
    {"if_last_user_turn_contains": "Run the shell command that prints the marker",
     "reply": '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo veri-tool-ok", '
              '"description": "Print a marker"}}\n</tool_call>'},
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def fake_weather(city: str) -> str:
    return {"Paris": "sunny in Paris", "London": "rainy in London"}[city]


def proxy_args(policy_url: str, model: Path, store: Path, *extra: str) -> list[str]:
    return ["serve", "proxy", "--policy-url", policy_url, "--model", str(model), "--store", str(store),
            "--max-tokens", "48", *extra]

"""The real Claude Code CLI (`claude -p`) through the capture proxy to the tiny model, with a tool
round trip (the scripted policy makes the random model call Bash, then answer)."""

from __future__ import annotations

import os
import subprocess

import pytest

from testkit.claude_code import claude_binary
from tests.proxy.conftest import assert_bridged_chain

pytestmark = [pytest.mark.needs("docker"), pytest.mark.slow]


def test_claude_p_tool_round_trip(session, control, tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ANTHROPIC_BASE_URL": session.anthropic_base_url,
        "ANTHROPIC_API_KEY": session.api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run(
        [str(claude_binary()), "-p", "Run the shell command that prints the marker, then report what it printed.",
         "--allowedTools", "Bash(echo:*)", "--max-turns", "4"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "The command printed veri-tool-ok." in done.stdout

    spans = [s for s in control.spans(session.rollout_id) if s.path == "/v1/messages"]
    assert len(spans) >= 2
    first_call = next(i for i, s in enumerate(spans) if s.response["stop_reason"] == "tool_use")
    tool_use = [b for b in spans[first_call].response["content"] if b["type"] == "tool_use"][0]
    assert tool_use["name"] == "Bash" and tool_use["input"]["command"] == "echo veri-tool-ok"
    after = spans[first_call + 1]
    assert after.messages[-1]["role"] in {"tool", "user"}
    assert any(m["role"] == "tool" and "veri-tool-ok" in m["content"] for m in after.messages)
    assert_bridged_chain(spans[first_call:first_call + 2])
    assert len(spans[first_call].tools or []) >= 5  # Claude Code's own tool set rides the chat template
    assert all(s.token_fidelity == "captured" for s in spans)

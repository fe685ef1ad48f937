"""The demo bundles run as plain subprocesses (no docker) from their folder, with exactly `rollout_env(...)`
plus the PATH and HOME their image would provide, and the scripted policy's rules that make the random
tiny model do the URL-extraction task: tests/demo's fixtures and testkit/record_demos.py use them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from testkit.claude_code import claude_binary
from testkit.codex import codex_binary
from testkit.proxy_script import proxy_args
from testkit.servers import RunningServer, start_server
from veri.core.harness import load_manifest, rollout_env
from veri.core.records import SessionInfo

REPO = Path(__file__).resolve().parents[1]
BUNDLES = REPO / "harness-bundles"
OPENAI_PAGE = 3  # the task the OpenAI-bundle tests run
CLAUDE_PAGE = 6  # the task the Claude-bundle tests run
SUB_AGENT_PAGE = 11  # the task Claude Code hands to a sub-agent (its Agent tool)
CODEX_PAGE = 9  # the task the Codex-bundle tests run
SUB_AGENT_BRIEF = "Sub-agent brief"  # how the scripted policy tells the sub-agent's first turn from the main one's


def fetch_rule(row: dict, reply: str) -> dict:
    return {"if_last_user_turn_contains": row["url"], "reply": reply}


def answer_rule(row: dict) -> dict:
    """Once the page is in the last turn (the tool's result), answer with the link it asks for."""
    return {"if_last_user_turn_contains": row["expected_url"], "reply": f"ANSWER: {row['expected_url']}"}


def tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def sub_agent_rules(row: dict) -> list[dict]:
    """Claude Code on `row` starts a sub-agent with its Agent tool (in the foreground: its result comes
    back as the tool result); the sub-agent fetches the page with Bash and answers; so does the main agent
    once that answer is its tool result. The answer rule first: both last turns that hold the link."""
    brief = f"{SUB_AGENT_BRIEF}: fetch {row['url']} with `curl -s` and report the URL of the link asked for."
    agent = {"description": "Fetch the page", "subagent_type": "general-purpose", "run_in_background": False,
             "prompt": brief}
    return [answer_rule(row),
            {"if_last_user_turn_contains": SUB_AGENT_BRIEF,
             "reply": tool_call("Bash", {"command": f"curl -s {row['url']}", "description": "Fetch the page"})},
            fetch_rule(row, tool_call("Agent", agent))]


@dataclass
class BundleRun:
    returncode: int
    stdout: str
    stderr: str
    output_dir: Path

    def answer(self) -> str:
        return (self.output_dir / "answer.txt").read_text().strip()

    def explain(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def image_bin(base_image: str, tmp_path: Path) -> list[str]:
    """The folder where a base image's CLI is (`claude` or `codex`, in /usr/local/bin there): the
    host's pinned binary linked into tmp_path/bin; none for the other bases."""
    cli = {"veri/base-claude-agent": ("claude", claude_binary), "veri/base-codex-agent": ("codex", codex_binary)}
    if base_image not in cli:
        return []
    program, binary = cli[base_image]
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if not (folder / program).exists():
        (folder / program).symlink_to(binary())
    return [str(folder)]


def proxy_with_max_tokens(policy: RunningServer, model: Path, store: Path, max_tokens: int, *extra: str):
    """A capture proxy of its own whose job caps each model call at `max_tokens`."""
    args = proxy_args(policy.url, model, store, *extra)
    args[args.index("--max-tokens") + 1] = str(max_tokens)
    return start_server(args)


def run_bundle(name: str, *, proxy: RunningServer, session: SessionInfo, row: dict, tmp_path: Path,
               max_turns: int = 4, api_key: str | None = None, rollout_id: str | None = None,
               timeout_s: float = 300) -> BundleRun:
    """Run a bundle's entrypoint once, the way a sandbox would, but as a local subprocess."""
    bundle = BUNDLES / name
    manifest = load_manifest(bundle)
    output_dir = tmp_path / "output"
    home = tmp_path / "home"
    home.mkdir()
    env = rollout_env(
        proxy_base_url=proxy.url, rollout_id=rollout_id or session.rollout_id, api_key=api_key or session.api_key,
        model="policy", task=row, task_index=row["page"], rollout_index=0, max_turns=max_turns,
        output_dir=str(output_dir),
    )
    # What the image itself provides: `python` (veri/base's venv; here the test venv), the CLI, a HOME.
    path = [str(Path(sys.executable).parent), *image_bin(manifest.base_image, tmp_path), "/usr/local/bin", "/usr/bin",
            "/bin"]
    env.update(PATH=os.pathsep.join(path), HOME=str(home))
    process = subprocess.Popen(manifest.entrypoint, cwd=bundle, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the harness and anything it started (claude)
        process.communicate()
        raise
    return BundleRun(process.returncode, stdout, stderr, output_dir)


# Harbor tasks on Claude Code (harness-bundles/harbor_claude): the scripted policy makes Claude Code hand the task
# to a sub-agent whose Bash command does it. tests/demo runs it on a stand-in WORKDIR, the stack in the task's image.
HARBOR_TASK = REPO / "config/data/harbor_cpu/train/write-word-apple"  # its instruction: /app/answer.txt, `apple`
COMMAND_DONE = "WROTE-THE-ANSWER"  # what the sub-agent's command prints: its output is its next last user turn
SUB_AGENT_REPORT = "Sub-agent report"  # the sub-agent's answer, which comes back in the main agent's tool result
# Not matched by sub_agent_rules' brief rule when these rules come first in a script that has both.
HARBOR_SUB_AGENT_BRIEF = f"{SUB_AGENT_BRIEF} for the Harbor task"


def harbor_sub_agent_rules(instruction_snippet: str, command: str) -> list[dict]:
    """Claude Code on a Harbor task whose instruction holds `instruction_snippet` starts a sub-agent with its
    Agent tool (in the foreground); the sub-agent runs `command` with Bash (it must print COMMAND_DONE) and
    reports; the main agent answers once that report is its tool result. First match wins, on the last user
    turn, so the order is the reverse of the run's: the report rule first (a tool result quoting more of the
    sub-agent's turns still ends the main agent), and neither the brief nor the report holds COMMAND_DONE.
    In a script with other rules, put these first: the URL sub-agent's brief does not hold this one's. Where
    harbor_bash runs the same task on the same script, pass a snippet only Claude Code's first turn holds:
    its turn is `<system-reminder>...</system-reminder>` then the instruction, so
    "</system-reminder>\n\n" + the instruction's text."""
    if COMMAND_DONE not in command:
        raise ValueError(f"the command must print {COMMAND_DONE} (the sub-agent's report rule matches it)")
    brief = f"{HARBOR_SUB_AGENT_BRIEF}: do the task in the working directory with one Bash command, then report."
    agent = {"description": "Do the task", "subagent_type": "general-purpose", "run_in_background": False,
             "prompt": brief}
    return [{"if_last_user_turn_contains": SUB_AGENT_REPORT, "reply": "Done: the sub-agent did the task."},
            {"if_last_user_turn_contains": COMMAND_DONE, "reply": f"{SUB_AGENT_REPORT}: the command did the task."},
            {"if_last_user_turn_contains": HARBOR_SUB_AGENT_BRIEF,
             "reply": tool_call("Bash", {"command": command, "description": "Do the task"})},
            {"if_last_user_turn_contains": instruction_snippet, "reply": tool_call("Agent", agent)}]


def run_in_workdir(name: str, *, proxy: RunningServer, session: SessionInfo, row: dict, workdir: Path,
                   tmp_path: Path, max_turns: int = 4, timeout_s: float = 300) -> BundleRun:
    """Run a Harbor-task bundle's entrypoint once as a local subprocess, the way the launcher runs it in a
    task's image: from the task's working directory (`workdir` stands in for its WORKDIR), the bundle's files
    named by their path (/veri/rt/harness/... there), `python` and the image's CLI on PATH."""
    bundle = BUNDLES / name
    manifest = load_manifest(bundle)
    output_dir = tmp_path / "output"
    home = tmp_path / "home"
    home.mkdir()
    env = rollout_env(
        proxy_base_url=proxy.url, rollout_id=session.rollout_id, api_key=session.api_key, model="policy", task=row,
        task_index=0, rollout_index=0, max_turns=max_turns, output_dir=str(output_dir),
    )
    path = [str(Path(sys.executable).parent), *image_bin(manifest.base_image, tmp_path), "/usr/local/bin", "/usr/bin",
            "/bin"]
    env.update(PATH=os.pathsep.join(path), HOME=str(home))
    program, *args = manifest.entrypoint
    command = [program, *(str(bundle / arg) if (bundle / arg).is_file() else arg for arg in args)]
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the harness and anything it started (claude)
        process.communicate()
        raise
    return BundleRun(process.returncode, stdout, stderr, output_dir)

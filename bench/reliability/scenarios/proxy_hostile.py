"""Hostile input to the capture proxy (docs/reliability.md, "The scenarios"): hand-written cases, a schemathesis fuzz
run over the rollout routes, and a flood of sessions never closed, against a real `veri serve proxy` in front of a real
`veri serve policy` on the tiny model.

Pass: no 5xx, every refusal in its protocol's error shape (OpenAI and Responses `{"error": {...}}`,
Anthropic `{"type": "error", "error": {...}}`) naming what is wrong, and the proxy's RSS bounded after
the flood. `tests/proxy/test_hostile.py` and `tests/proxy/test_schemathesis.py` run the same checks,
CI-sized; `run(quick=False)` is the full size.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:  # run by bench/reliability/run.py, not from the repo root
    sys.path.insert(0, str(REPO))

from testkit.servers import start_server  # noqa: E402
from veri.core.records import SessionInfo  # noqa: E402
from veri.services.proxy.anthropic.protocol import MessagesRequest  # noqa: E402
from veri.services.proxy.control_client import ControlClient  # noqa: E402
from veri.services.proxy.openai.protocol import ChatCompletionRequest, CompletionRequest  # noqa: E402
from veri.services.proxy.requests import MAX_TOOLS  # noqa: E402
from veri.services.proxy.responses.protocol import ResponsesRequest  # noqa: E402
from veri.services.proxy.settings import ProxySettings  # noqa: E402

NAME = "proxy_hostile"

# The rollout routes and the request model each parses its body with (the fuzz schema's bodies).
ROLLOUT_ROUTES: dict[str, Any] = {
    "/chat/completions": ChatCompletionRequest,
    "/completions": CompletionRequest,
    "/messages": MessagesRequest,
    "/messages/count_tokens": MessagesRequest,
    "/responses": ResponsesRequest,
}

# A proxy RSS growth above this over the session flood counts as a leak (sessions live in SQLite).
RSS_GROWTH_LIMIT_MB = 64.0

MAX_BODY_BYTES: int = ProxySettings.model_fields["max_body_bytes"].default  # the proxy runs with its default

USER = [{"role": "user", "content": "hi"}]


def is_anthropic(path: str) -> bool:
    return "/v1/messages" in path


def error_shape_problem(path: str, status: int, body: bytes) -> str | None:
    """None if a refusal is in its protocol's error shape with a message; else what is wrong."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"{status} answer is not JSON: {body[:200]!r}"
    error = answer.get("error") if isinstance(answer, dict) else None
    if is_anthropic(path) and (answer.get("type") != "error" if isinstance(answer, dict) else True):
        return f"{status} answer is not Anthropic's error shape: {body[:200]!r}"
    if not isinstance(error, dict) or not isinstance(error.get("type"), str) or not error.get("message"):
        return f"{status} answer has no error.type and error.message: {body[:200]!r}"
    return None


def answer_problem(path: str, status: int, body: bytes) -> str | None:
    """What is wrong with any answer to a rollout route: a 5xx, or a refusal out of shape."""
    if status >= 500:
        return f"{status} from {path}: {body[:300]!r}"
    if status >= 400:
        return error_shape_problem(path, status, body)
    return None


@dataclass(frozen=True)
class Case:
    """One hostile request to a rollout route, and the refusal (or answer) it must get."""

    name: str
    route: str  # under /r/<rollout>/v1
    body: Any  # bytes as sent, or a JSON value (or a callable: a fresh one per send, for big bodies)
    status: int
    says: str = ""  # a phrase the error message must hold (it names what is wrong or its fix)
    headers: dict[str, str] = field(default_factory=dict)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": [value]}
    return value


def _tool(index: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": f"tool_{index}", "description": "does nothing",
                                             "parameters": {"type": "object", "properties": {}}}}


def hostile_cases(*, max_model_len: int, tools: int, max_body_bytes: int = MAX_BODY_BYTES) -> list[Case]:
    over_context = " hello" * (max_model_len + 16)  # one token each at least: past the context
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a pdf"}}
    return [
        Case("body over the cap (declared)", "/chat/completions",
             lambda: b"{" + b" " * max_body_bytes + b"}", 413, f"limit of {max_body_bytes} bytes"),
        Case("body over the cap (chunked)", "/messages",
             lambda: _chunks(b"{" + b" " * max_body_bytes + b"}"), 413, f"limit of {max_body_bytes} bytes"),
        Case("not JSON", "/chat/completions", b"{'messages': nope", 400, "not valid JSON"),
        Case("invalid UTF-8", "/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
             400, "not valid JSON"),
        Case("lone surrogate", "/messages",
             b'{"max_tokens": 8, "messages": [{"role": "user", "content": "a\\ud800b"}]}', 400, ""),
        Case("JSON array body", "/responses", [1, 2], 400, "JSON object"),
        Case("empty body", "/completions", b"", 400, "not valid JSON"),
        Case("nesting past the JSON parser", "/chat/completions",
             b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "not valid JSON"),
        Case("nesting past what the proxy can record", "/chat/completions",
             {"messages": USER, "metadata": _nested(150)}, 400, "deeper than 254 levels"),
        Case("deep nesting in an extra field", "/chat/completions", {"messages": USER, "metadata": _nested(120)}, 200),
        Case("deep nesting in tool parameters", "/chat/completions",
             {"messages": USER, "tools": [{"type": "function", "function": {
                 "name": "deep", "parameters": _nested(120)}}]}, 200),
        Case("messages a string", "/chat/completions", {"messages": "hi"}, 400, "messages"),
        Case("content a number", "/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400,
             "content"),
        Case("unknown role", "/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
        Case("max_tokens a string", "/messages", {"max_tokens": "many", "messages": USER}, 400, "max_tokens"),
        Case("stream a string", "/responses", {"input": "hi", "stream": "yes please"}, 400, "stream"),
        Case("tools an object", "/chat/completions", {"messages": USER, "tools": {"a": 1}}, 400, "tools"),
        Case("tool function not an object", "/chat/completions",
             {"messages": USER, "tools": [{"type": "function", "function": "get_weather"}]}, 400, "function"),
        Case("tool_calls of numbers", "/chat/completions",
             {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [1, 2]}]}, 400, ""),
        Case("tool call arguments not JSON", "/chat/completions",
             {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{nope"}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]}, 200),  # history, as the harness kept it
        Case("Anthropic content a number", "/messages", {"max_tokens": 8, "messages": [
            {"role": "user", "content": 7}]}, 400, "content"),
        Case("Anthropic content an empty list", "/messages", {"max_tokens": 8, "messages": [
            {"role": "user", "content": []}]}, 400, "no message has any content"),
        Case("count_tokens of no content", "/messages/count_tokens", {"messages": [{"role": "user", "content": []}]},
             400, "no message has any content"),
        Case("Responses input a number", "/responses", {"input": 12}, 400, "input"),
        Case("completions prompt a dict", "/completions", {"prompt": {"a": 1}}, 400, "prompt"),
        Case("completions prompt ids out of the vocabulary", "/completions", {"prompt": [10**9, -5]}, 400, ""),
        Case("mismatched tool-call id (chat)", "/chat/completions", {"messages": [
            *USER, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_zzz", "content": "ok"}]}, 200),
        Case("mismatched tool-use id (Anthropic)", "/messages", {"max_tokens": 8, "messages": [
            *USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_zzz", "content": "ok"}]}]},
             200),
        Case("mismatched call id (Responses)", "/responses", {"input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_zzz", "output": "ok"}]}, 200),
        Case("unknown previous_response_id", "/responses", {"input": "hi", "previous_response_id": "resp_nope"},
             400, "previous_response_id"),
        Case("image block (Anthropic)", "/messages", {"max_tokens": 8, "messages": [
            {"role": "user", "content": [image, {"type": "text", "text": "what is this"}]}]}, 400, "text only"),
        Case("document block (Anthropic)", "/messages", {"max_tokens": 8, "messages": [
            {"role": "user", "content": [document]}]}, 400, "text only"),
        Case("image in count_tokens", "/messages/count_tokens", {"messages": [
            {"role": "user", "content": [image]}]}, 400, "text only"),
        Case("image_url part (chat)", "/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}, 400, "text only"),
        Case("input_image part (Responses)", "/responses", {"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]}, 400, "text only"),
        Case("input_file part (Responses)", "/responses", {"input": [{"role": "user", "content": [
            {"type": "input_file", "file_data": "JVBERi0=", "filename": "a.pdf"}]}]}, 400, "text only"),
        Case("prompt over max_model_len (chat)", "/chat/completions",
             {"messages": [{"role": "user", "content": over_context}]}, 400,
             f"maximum context length is {max_model_len}"),
        Case("prompt over max_model_len (completions)", "/completions", {"prompt": over_context}, 400,
             f"maximum context length is {max_model_len}"),
        Case(f"{tools} tools", "/chat/completions", {"messages": USER, "tools": [_tool(i) for i in range(tools)]},
             400, f"at most {MAX_TOOLS} per call"),
        Case(f"{tools} tools (Anthropic)", "/messages", {"max_tokens": 8, "messages": USER, "tools": [
            {"name": f"tool_{i}", "input_schema": {"type": "object"}} for i in range(tools)]}, 400,
             f"at most {MAX_TOOLS} per call"),
        Case(f"{MAX_TOOLS} tools, the most taken", "/chat/completions",
             {"messages": USER, "tools": [_tool(i) for i in range(MAX_TOOLS)]}, 200),
    ]


def _chunks(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    """A body sent chunked (no content-length), so the cap is enforced while reading."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def route_problems(client: httpx.Client, control: ControlClient) -> list[str]:
    """No such route, or the wrong method: refused in the protocol's shape, naming the routes there are."""
    session = control.open_session()
    headers = {"authorization": f"Bearer {session.api_key}"}
    problems = []
    for method, route, status in [("GET", "/chat/completions", 405), ("POST", "/embeddings", 404),
                                  ("POST", "/messages/batches", 404), ("DELETE", "/responses", 405)]:
        reply = client.request(method, f"{session.openai_base_url}{route}", headers=headers)
        problem = answer_problem(f"/v1{route}", reply.status_code, reply.content)
        if problem is None and (reply.status_code != status or "/v1/chat/completions" not in reply.text):
            problem = f"{reply.status_code} (expected {status}, naming the routes): {reply.text[:300]}"
        if problem:
            problems.append(f"{method} {route}: {problem}")
    return problems


def send(client: httpx.Client, session: SessionInfo, case: Case) -> httpx.Response:
    body = case.body() if callable(case.body) else case.body
    # The stdlib encoder: orjson stops at 255 levels, and deeper nesting is one of the cases.
    content = body if isinstance(body, bytes) or isinstance(body, Iterator) else json.dumps(body).encode()
    headers = {"authorization": f"Bearer {session.api_key}", "content-type": "application/json", **case.headers}
    return client.post(f"{session.openai_base_url}{case.route}", content=content, headers=headers)


def case_problem(case: Case, reply: httpx.Response) -> str | None:
    path = f"/v1{case.route}"
    if problem := answer_problem(path, reply.status_code, reply.content):
        return f"{case.name}: {problem}"
    if reply.status_code != case.status:
        return f"{case.name}: {reply.status_code} (expected {case.status}): {reply.content[:300]!r}"
    if case.says and case.says not in reply.text:
        return f"{case.name}: the error does not say {case.says!r}: {reply.content[:300]!r}"
    return None


def run_cases(client: httpx.Client, control: ControlClient, cases: list[Case]) -> tuple[int, int, list[str]]:
    """Each case on a fresh session: (cases run, 5xx seen, problems)."""
    problems, server_errors = [], 0
    for case in cases:
        session = control.open_session()
        reply = send(client, session, case)
        server_errors += reply.status_code >= 500
        if problem := case_problem(case, reply) or span_problem(control, session, case, reply.status_code):
            problems.append(problem)
    return len(cases), server_errors, problems


SPAN_LOST = "no span recorded"


def span_problem(control: ControlClient, session: SessionInfo, case: Case, status: int) -> str | None:
    """A sampled answer has its one span; a refusal (and count_tokens) leaves none."""
    expected = 1 if status == 200 and case.route != "/messages/count_tokens" else 0
    found = len(control.spans(session.rollout_id))
    if found == expected:
        return None
    what = SPAN_LOST if found < expected else f"{found} spans"
    return f"{case.name}: {what} for a {status}"


def closed_session_problems(client: httpx.Client, control: ControlClient) -> list[str]:
    """A session's key after close: every route refuses it (409, each protocol's shape), none samples."""
    session = control.open_session()
    control.close_session(session.rollout_id)
    problems = []
    bodies = {"/chat/completions": {"messages": USER}, "/messages": {"max_tokens": 8, "messages": USER},
              "/responses": {"input": "hi"}, "/completions": {"prompt": "hi"},
              "/messages/count_tokens": {"messages": USER}}
    for route, body in bodies.items():
        reply = send(client, session, Case(f"after close {route}", route, body, 409, "is closed"))
        if problem := case_problem(Case(f"after close {route}", route, body, 409, "is closed"), reply):
            problems.append(problem)
    if spans := control.spans(session.rollout_id):
        problems.append(f"a closed session got {len(spans)} spans")
    return problems


def process_rss_mb(pid: int) -> float:
    """RSS of the proxy and its children (a multi-worker proxy's workers), in MB."""
    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 2**20


def session_flood(control: ControlClient, client: httpx.Client, pid: int,
                  sessions: int) -> tuple[float, float, list[str]]:
    """Open `sessions` sessions, call each once (so each is a live rollout), close none: RSS before
    and after, and any problem (a leak past RSS_GROWTH_LIMIT_MB, a refusal out of shape)."""
    warm = control.open_session()
    send(client, warm, Case("warm", "/messages/count_tokens", {"messages": USER}, 200))
    before = process_rss_mb(pid)
    problems = []
    for _ in range(sessions):
        session = control.open_session()
        reply = send(client, session, Case("count", "/messages/count_tokens", {"messages": USER}, 200))
        if reply.status_code != 200:
            problems.append(f"session flood: count_tokens answered {reply.status_code}: {reply.text[:200]}")
            break
    after = process_rss_mb(pid)
    if after - before > RSS_GROWTH_LIMIT_MB:
        problems.append(f"proxy RSS grew {after - before:.0f} MB over {sessions} open sessions "
                        f"({before:.0f} -> {after:.0f} MB; limit {RSS_GROWTH_LIMIT_MB:.0f} MB)")
    return before, after, problems


# --- the schemathesis fuzz run ----------------------------------------------------------------------


def fuzz_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    """The proxy's own OpenAPI schema, its rollout routes only, each given the body schema its request
    model parses (the routes read the body themselves, so FastAPI publishes none)."""
    schema = {**openapi, "paths": {}}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for path, operations in openapi["paths"].items():
        if not path.startswith("/r/{rollout_id}/v1"):
            continue
        route = path.removeprefix("/r/{rollout_id}/v1")
        kept = {}
        for method, operation in operations.items():
            operation = {**operation, "responses": {"default": {"description": "any"}}}
            if model := ROLLOUT_ROUTES.get(route) if method == "post" else None:
                body = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(body.pop("$defs", {}))
                operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
            kept[method] = operation
        schema["paths"][path] = kept
    return schema


def fuzz(base_url: str, control: ControlClient, *, max_examples: int,
         statuses: Counter[int] | None = None) -> tuple[int, int, list[str]]:
    """schemathesis over every rollout operation (valid and invalid bodies) on one open session:
    (calls made, 5xx seen, problems); `statuses` counts the answers."""
    import hypothesis
    import schemathesis
    from schemathesis.generation import GenerationMode

    session = control.open_session()
    raw = httpx.get(f"{base_url}/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(fuzz_schema(raw))
    schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    calls, server_errors, problems = 0, 0, []
    headers = {"authorization": f"Bearer {session.api_key}"}

    def fuzz_operation(operation: Any) -> None:
        @hypothesis.settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(hypothesis.HealthCheck), phases=[hypothesis.Phase.generate])
        @hypothesis.given(case=operation.as_strategy())
        def call(case: Any) -> None:
            nonlocal calls, server_errors
            case.path_parameters = {"rollout_id": session.rollout_id}
            reply = case.call(base_url=base_url, headers=headers, timeout=120)
            calls += 1
            if statuses is not None:
                statuses[reply.status_code] += 1
            server_errors += reply.status_code >= 500
            path = operation.path.replace("{rollout_id}", session.rollout_id)
            if (problem := answer_problem(path, reply.status_code, reply.content)) and len(problems) < 20:
                problems.append(f"{operation.method.upper()} {operation.path} {case.body!r:.200}: {problem}")

        call()

    for result in schema.get_all_operations():
        fuzz_operation(result.ok())
    return calls, server_errors, problems


# --- the scenario -----------------------------------------------------------------------------------


@contextlib.contextmanager
def hostile_stack(model: Path, *, max_tokens: int = 8) -> Iterator[tuple[str, int, int]]:
    """A real policy and proxy on the tiny model: (proxy URL, proxy pid, the policy's max_model_len)."""
    with tempfile.TemporaryDirectory(prefix="veri-hostile-") as store, \
            start_server(["serve", "policy", "--model", str(model)]) as policy, \
            start_server(["serve", "proxy", "--policy-url", policy.url, "--model", str(model), "--store", store,
                          "--max-tokens", str(max_tokens)]) as proxy:
        max_model_len = httpx.get(f"{policy.url}/v1/models", timeout=30).json()["data"][0]["max_model_len"]
        yield proxy.url, proxy.process.pid, max_model_len


def tiny_model() -> Path:
    from veri.tools.models.tiny import build_tiny_model

    prebuilt = REPO / "build" / "models" / "tiny"
    return prebuilt if (prebuilt / "config.json").exists() else build_tiny_model(prebuilt)


def run(quick: bool) -> dict:
    sessions, max_examples = (1_000, 10) if quick else (10_000, 300)
    problems: list[str] = []
    runs = server_errors = 0
    notes = []
    with hostile_stack(tiny_model()) as (url, pid, max_model_len), httpx.Client(timeout=300) as client:
        control = ControlClient(url)
        steps: list[tuple[str, Callable[[], tuple[int, int, list[str]]]]] = [
            ("cases", lambda: run_cases(client, control, hostile_cases(
                max_model_len=max_model_len, tools=10_000))),
            ("closed", lambda: (5, 0, closed_session_problems(client, control))),
            ("routes", lambda: (4, 0, route_problems(client, control))),
            ("fuzz", lambda: fuzz(url, control, max_examples=max_examples)),
        ]
        for label, step in steps:
            started = time.monotonic()
            count, errors, found = step()
            runs, server_errors = runs + count, server_errors + errors
            problems += found
            notes.append(f"{label}: {count} in {time.monotonic() - started:.0f}s")
        before, after, found = session_flood(control, client, pid, sessions)
        runs += sessions
        problems += found
        notes.append(f"{sessions} open sessions: RSS {before:.0f} -> {after:.0f} MB")
    spans_lost = sum(SPAN_LOST in problem for problem in problems)
    return {"scenario": NAME, "runs": runs, "outcome": "fail" if problems else "pass", "spans_lost": spans_lost,
            "5xx": server_errors, "escapes": 0, "notes": "; ".join(notes + problems[:5])}


if __name__ == "__main__":
    print(orjson.dumps(run(quick="--quick" in sys.argv), option=orjson.OPT_INDENT_2).decode())

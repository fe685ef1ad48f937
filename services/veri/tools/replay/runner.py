"""Replaying a recording: its requests, in order, through a proxy; the spans, episode and reward
that come out.

A harness echoes back the ids the proxy gave it (tool call ids, message ids), and a replay's proxy
gives new ones: each later request gets the replay's ids in place of the recorded ones, as the
harness would have sent them, and `Replay.id_map` lets the diff map them back.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from veri.core.episodes import Episode
from veri.core.records import RecordedRequest, Span
from veri.core.rollout_record import RewardOutcome
from veri.services.proxy.control_client import ControlClient
from veri.services.proxy.rendering import model_fingerprint
from veri.tools.replay import policy
from veri.tools.replay.recording import Recording, RecordingError, episode_of, score

REQUEST_TIMEOUT_S = 300.0


@dataclass
class Replay:
    spans: list[Span]
    statuses: dict[int, int]  # recorded request seq -> the status the replay got
    episode: Episode
    reward: RewardOutcome | None
    id_map: dict[str, str] = field(default_factory=dict)  # recorded id -> the replay's


def replay_through(recording: Recording, proxy_url: str, *, token: str | None = None) -> Replay:
    """Send the recording's requests to the proxy at `proxy_url` (its policy: `veri replay policy`)."""
    control = ControlClient(proxy_url, token=token)
    session = control.open_session(metadata={"replay_of": recording.name})
    id_map: dict[str, str] = {}
    statuses: dict[int, int] = {}
    spans: list[Span] = []
    with httpx.Client(base_url=f"{proxy_url.rstrip('/')}/r/{session.rollout_id}", timeout=REQUEST_TIMEOUT_S) as http:
        for request in replay_order(recording.requests):
            reply = http.request(request.method, _target(request), content=_body(request, id_map),
                                 headers=_headers(request, session.api_key))
            reply.read()  # a streamed answer in full: the span is written before it starts anyway
            statuses[request.seq] = reply.status_code
            if reply.status_code == 200:
                spans = _new_spans(control, session.rollout_id, spans, recording.spans, id_map)
    control.close_session(session.rollout_id)
    spans = control.spans(session.rollout_id)
    episode = episode_of(spans, recording.status, recording.exit_code, recording.verifier)
    return Replay(spans, statuses, episode, score(recording, spans, episode), id_map)


def replay_order(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """The order the proxy answered them: a call made while another was in flight cannot depend on
    it, and answering in this order gives the spans the recorded request_index (committed before the
    answer). Recordings without answer times keep arrival order."""
    return sorted(requests, key=lambda request: (request.answered_at or request.received_at, request.seq))


def _target(request: RecordedRequest) -> str:
    return f"{request.path}?{request.query}" if request.query else request.path


def _body(request: RecordedRequest, id_map: dict[str, str]) -> bytes:
    body = request.body
    for recorded, replayed in id_map.items():
        body = body.replace(recorded, replayed)
    return body.encode()


def _headers(request: RecordedRequest, api_key: str) -> dict[str, str]:
    headers = dict(request.headers)
    if request.auth == "x-api-key":
        headers["x-api-key"] = api_key
    elif request.auth == "bearer":
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _new_spans(control: ControlClient, rollout_id: str, known: list[Span], recorded: list[Span],
               id_map: dict[str, str]) -> list[Span]:
    """The rollout's spans now; each new one's ids paired with its recorded twin's (same position)."""
    spans = control.spans(rollout_id)
    for span in spans[len(known):]:
        if span.request_index < len(recorded):
            id_map.update(_ids_given(recorded[span.request_index], span))
    return spans


def _ids_given(recorded: Span, replayed: Span) -> dict[str, str]:
    """The ids the proxy made up for a reply, recorded -> replayed: every string under an `id` or
    `*_id` key (response, message, tool call, output item ids) where the two responses differ."""
    pairs: dict[str, str] = {}
    _pair_ids(recorded.response, replayed.response, pairs)
    return pairs


def _pair_ids(recorded: Any, replayed: Any, pairs: dict[str, str], key: str = "") -> None:
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for name in recorded.keys() & replayed.keys():
            _pair_ids(recorded[name], replayed[name], pairs, name)
    elif isinstance(recorded, list) and isinstance(replayed, list):
        for old, new in zip(recorded, replayed, strict=False):
            _pair_ids(old, new, pairs, key)
    elif (key == "id" or key.endswith("_id")) and isinstance(recorded, str) and isinstance(replayed, str):
        if recorded and replayed and recorded != replayed:
            pairs[recorded] = replayed


# --- in-process: the replay policy and a proxy, each on a loopback port in a thread --------------

@contextmanager
def serve_in_thread(app: Any, name: str) -> Iterator[str]:
    """`app` on a free loopback port in a background thread: its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=120))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"veri-replay-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RecordingError(f"the in-process {name} did not start (see the log above)")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def check_model(recording: Recording, model_dir: Path) -> None:
    if not model_dir.is_dir():
        raise RecordingError(f"no model folder at {model_dir}: pass the model {recording.name!r} was recorded with"
                             " (--model DIR; `make tiny-model` builds build/models/tiny)")
    found = model_fingerprint(model_dir)
    if found != recording.capture.model_fingerprint:
        raise RecordingError(
            f"{model_dir} is not the model {recording.name!r} was recorded with (its tokenizer/chat template"
            f" fingerprint is {found[:12]}, the recording's {recording.capture.model_fingerprint[:12]}): pass the"
            " model it was recorded with (--model), or re-record it if the change is intended")


def replay_in_process(recording: Recording, model_dir: Path) -> Replay:
    """Replay through a fresh proxy (the recording's capture settings, `model_dir`'s tokenizer) whose
    policy answers with the recorded completions."""
    from veri.services.proxy.app import create_app
    from veri.services.proxy.settings import ProxySettings

    check_model(recording, model_dir)
    capture = recording.capture
    with tempfile.TemporaryDirectory(prefix="veri-replay-spans-") as store, \
            serve_in_thread(policy.create_app(recording), "replay policy") as policy_url:
        settings = ProxySettings(
            policy_url=policy_url, model_dir=model_dir, renderer=capture.renderer,
            chat_template_kwargs=capture.chat_template_kwargs, thinking_retention=capture.thinking_retention,
            temperature=capture.temperature, top_p=capture.top_p, max_tokens=capture.max_tokens,
            store_dir=Path(store), control_token=None,
        )
        with serve_in_thread(create_app(settings), "proxy") as proxy_url:
            return replay_through(recording, proxy_url)

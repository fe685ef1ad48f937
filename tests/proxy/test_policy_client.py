"""Reading the policy's reply: the prompt ids it echoes must be the ids sent, however it spells them."""

from __future__ import annotations

import asyncio
import json

import httpx
import orjson
import psutil
import pytest

from tests.proxy.conftest import standin
from tests.waiting import wait_for
from veri.core.sampling import NEUTRAL
from veri.services.proxy.errors import PolicyUnavailable
from veri.services.proxy.policy_client import PolicyClient, PolicyCompletion, read_completion

PROMPT = list(range(150, 8350))


def reply(echo, *, text: str = "", top_level_echo=None) -> dict:
    body = {
        "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "text": text, "token_ids": [5, 6, 7], "prompt_token_ids": echo,
                     "logprobs": {"token_logprobs": [-0.1, -0.2, -0.3]}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": 3, "total_tokens": len(PROMPT) + 3},
    }
    if top_level_echo is not None:
        body["prompt_token_ids"] = top_level_echo
    return body


def read(payload: bytes):
    return read_completion(payload, PROMPT, orjson.dumps(PROMPT))


@pytest.mark.parametrize("dumps", [orjson.dumps, lambda body: json.dumps(body, indent=1).encode()],
                         ids=["compact", "spaced"])
def test_an_echo_of_the_sent_ids_is_accepted(dumps) -> None:
    body = read(dumps(reply(PROMPT, top_level_echo=PROMPT)))
    choice = body.choices[0]
    assert choice.token_ids == [5, 6, 7] and choice.logprobs.token_logprobs == [-0.1, -0.2, -0.3]
    assert body.usage.prompt_tokens == len(PROMPT)


@pytest.mark.parametrize(("echo", "where"), [
    ([*PROMPT[:100], 1, *PROMPT[101:]], "first difference at token 100"),
    (PROMPT[:4096], "4096 echoed, first difference at token 4096"),
    ([*PROMPT, 9], "8201 echoed"),
])
def test_an_echo_of_other_ids_is_refused(echo, where) -> None:
    with pytest.raises(PolicyUnavailable, match=where):
        read(orjson.dumps(reply(echo)))


def test_a_top_level_echo_is_checked_too() -> None:
    with pytest.raises(PolicyUnavailable, match="first difference at token 0"):
        read(orjson.dumps(reply(PROMPT, top_level_echo=[0, *PROMPT[1:]])))


def test_text_that_spells_the_key_is_left_alone() -> None:
    text = f'"prompt_token_ids": {orjson.dumps(PROMPT[:3]).decode()} and "prompt_token_ids":'
    body = read(orjson.dumps(reply(PROMPT, text=text)))
    assert body.choices[0].text == text


def test_no_echo_and_unreadable_replies() -> None:
    assert read(orjson.dumps(reply(None))).choices[0].token_ids == [5, 6, 7]
    with pytest.raises(PolicyUnavailable, match="unreadable completion"):
        read(orjson.dumps(reply(PROMPT))[:-10])


@pytest.mark.needs("process")
def test_a_connection_the_policy_server_closed_is_not_reused(reply_ids) -> None:
    """uvicorn (under vLLM and the hf backend) closes a connection idle for 5 s; one kept longer and
    written into before the loop has read the server's close is a 503 to the harness (seen at 64
    sessions after a pause)."""

    async def calls(url: str) -> list[PolicyCompletion]:
        client = PolicyClient(url, model=None, timeout_s=30)
        await client.start()
        try:
            await asyncio.gather(*(complete(client) for _ in range(4)))
            # A busy event loop (this wait blocks it): the server closes the idle connections and the
            # loop has not read the closes when the next calls go out.
            port = int(url.rsplit(":", 1)[1])
            wait_for(lambda: closed_by_peer(port), "the policy server to close the idle connections")
            return await asyncio.gather(*(complete(client) for _ in range(4)))
        finally:
            await client.aclose()

    with standin(reply_ids) as url:
        assert [completion.token_ids for completion in asyncio.run(calls(url))] == [reply_ids] * 4


def closed_by_peer(port: int) -> bool:
    """This process's connections to `port` all closed by the other end, not yet by this one."""
    mine = [c for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port]
    return bool(mine) and all(c.status == psutil.CONN_CLOSE_WAIT for c in mine)


def complete(client: PolicyClient):
    return client.complete(PROMPT, max_tokens=8, temperature=1.0, top_p=1.0, stop_token_ids=[])


def test_a_connection_closed_under_the_first_try_is_tried_once_more(reply_ids) -> None:
    """The server drops the connection as the call is written (its keep-alive close racing ours): the
    client tries once more on a fresh connection instead of answering the harness 503."""
    body = orjson.dumps(reply(None) | {"choices": [{**reply(None)["choices"][0], "token_ids": reply_ids,
                                                     "logprobs": {"token_logprobs": [-0.5] * len(reply_ids)}}]})
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = int(next(line.split(b":")[1] for line in lines if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        seen.append(length)
        if len(seen) == 1:  # the first try: closed with no answer
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
        writer.close()

    assert asyncio.run(complete_against(serve)).token_ids == reply_ids
    assert len(seen) == 2 and seen[0] == seen[1]  # the same body, twice


def test_a_policy_that_keeps_closing_is_unavailable() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    with pytest.raises(PolicyUnavailable, match="unreachable"):
        asyncio.run(complete_against(serve))


async def complete_against(serve) -> PolicyCompletion:
    """One call of a fresh PolicyClient to a raw asyncio server handling each connection with `serve`."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    client = PolicyClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", model=None, timeout_s=30)
    await client.start()
    try:
        return await complete(client)
    finally:
        await client.aclose()
        server.close()


@pytest.mark.needs("process")
def test_every_sampling_field_a_server_could_default_is_sent_neutral() -> None:
    """A vLLM started without `--generation-config vllm` fills each field a request leaves out from the model
    folder's generation_config.json (top_k 20 for Qwen3-4B-Instruct-2507): the proxy leaves none out."""

    async def call(url: str) -> None:
        client = PolicyClient(url, model=None, timeout_s=30)
        await client.start()
        try:
            await client.complete([1, 2, 3], max_tokens=8, temperature=0.7, top_p=1.0, stop_token_ids=[4])
        finally:
            await client.aclose()

    with standin([5, 6, 7], "--record") as url:
        asyncio.run(call(url))
        [request] = httpx.get(f"{url}/standin/requests").json()
    fields = request["fields"]
    assert {key: fields.get(key) for key in NEUTRAL} == NEUTRAL
    assert (fields["temperature"], fields["top_p"], fields["max_tokens"]) == (0.7, 1.0, 8)
    assert NEUTRAL == {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                       "frequency_penalty": 0.0}  # off, in vLLM's and the hf backend's terms

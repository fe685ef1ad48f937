"""An OpenAI-compatible model server that answers instantly: the outside world of the overhead bench.

Both gateways under test call it, so only the gateway is measured: veri's proxy sends token ids to
`/v1/completions`, Agent Lightning forwards chat to `/v1/chat/completions`. Replies have vLLM
0.31's shape with `return_token_ids`, prompt ids echoed included (an 8k-token prompt comes back as
8k ids, as it does from vLLM), and always the same tool call:

  POST /v1/completions        echoes `prompt` (a flat list of ids) as the choice's `prompt_token_ids`
  POST /v1/chat/completions   a `lookup` tool call; `prompt_token_ids` from the table below
  PUT  /upstream/chat-prompts {"<number of messages>": [prompt ids], ...}: what a chat request of that
                              many messages renders to (the bench sends its own renders), prebuilt

    python bench/instant_upstream.py --port 8001 --reply-ids '[1, 2, 3]'
"""

from __future__ import annotations

import argparse

import orjson
import uvicorn

ECHO = "<the prompt ids>"  # placeholder the request's prompt bytes replace
TOOL_CALL = {"id": "call_bench", "type": "function",
             "function": {"name": "lookup", "arguments": '{"q": "word"}'}}


class InstantUpstream:
    def __init__(self, reply_ids: list[int]):
        self.reply_ids = reply_ids
        self.logprobs = [-0.5] * len(reply_ids)
        self.chat_replies: dict[int, bytes] = {}

    def completion(self, body: bytes) -> bytes:
        """The echo is the request's `prompt` bytes, copied: parsing 8k ids would not be instant."""
        start = body.index(b"[", body.index(b'"prompt":'))
        prompt = body[start : body.index(b"]", start) + 1]
        reply = orjson.dumps({
            "id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "text": "", "token_ids": self.reply_ids, "prompt_token_ids": ECHO,
                         "logprobs": {"token_logprobs": self.logprobs}, "finish_reason": "stop",
                         "stop_reason": None}],
            "usage": self._usage(prompt.count(b",") + 1),
        })
        return reply.replace(orjson.dumps(ECHO), prompt, 1)

    def chat_reply(self, prompt: list[int]) -> bytes:
        content_logprobs = [{"token": f"token_id:{token}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                            for token in self.reply_ids]
        return orjson.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                         "logprobs": {"content": content_logprobs}, "finish_reason": "tool_calls",
                         "stop_reason": None, "token_ids": self.reply_ids}],
            "usage": self._usage(len(prompt)),
            "prompt_token_ids": prompt,
        })

    def _usage(self, prompt_tokens: int) -> dict:
        completion_tokens = len(self.reply_ids)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        path, status = scope["path"], 200
        if path == "/v1/completions":
            payload = self.completion(body)
        elif path == "/v1/chat/completions":
            count = len(orjson.loads(body)["messages"])
            payload = self.chat_replies.get(count, b"")
            status = 200 if payload else 400
        elif path == "/upstream/chat-prompts":
            self.chat_replies = {int(count): self.chat_reply(ids) for count, ids in orjson.loads(body).items()}
            payload = b"{}"
        else:
            payload = b"{}"
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply-ids", required=True, help="JSON list of the token ids every reply samples")
    args = parser.parse_args()
    # vLLM's 5 s keep-alive races the proxy's 4 s on a box this loaded (a connection idle through a round
    # of the other path is closed as its next request is written: a 503): not what this bench measures.
    uvicorn.run(InstantUpstream(orjson.loads(args.reply_ids)), host="127.0.0.1", port=args.port,
                log_level="warning", timeout_keep_alive=600)

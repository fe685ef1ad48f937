"""Stands in for `vllm serve` where vLLM cannot run (no GPU): answers `/v1/completions` instantly
with fixed token ids, in vLLM's shape. The overhead bench uses it so only the proxy is measured;
tests use it (with --no-version, as vLLM reports none) for the trainer-set policy version."""

from __future__ import annotations

import argparse
import json

import uvicorn


def create_app(reply_ids: list[int], *, report_version: bool = True):
    body = {
        "id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "text": "", "token_ids": reply_ids, "prompt_token_ids": None,
                     "logprobs": {"token_logprobs": [-0.5] * len(reply_ids)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": len(reply_ids), "total_tokens": len(reply_ids)},
    }
    if report_version:
        body["policy_version"] = 0
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply-ids", required=True, help="JSON list of token ids")
    parser.add_argument("--no-version", action="store_true", help="omit policy_version, as vLLM does")
    args = parser.parse_args()
    app = create_app(json.loads(args.reply_ids), report_version=not args.no_version)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")

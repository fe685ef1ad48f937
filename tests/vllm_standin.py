"""Stands in for `vllm serve` where vLLM cannot run (no GPU): answers `/v1/completions` instantly
with fixed token ids, in vLLM 0.31's shape. The overhead bench uses it so only the proxy is measured;
tests use it (with --no-version, as vLLM reports none) for the trainer-set policy version, and for
the replies and routing the proxy must handle:

  PUT /standin/reply     {"finish_reason": "stop"|"length"|"repetition"|"abort"|"error",
                          "logprobs": "ok"|"null"|"null_entry", "delay_s": S, "times": N}
                         sets the shape of the next N replies (then back to stop/ok; no times: until reset)
  GET /standin/requests  with --record: every completion request so far, {"rank": its
                         X-data-parallel-rank or None, "prompt": ids, "fields": the body's other fields}
  --prefix-cache BLOCK   report `usage.prompt_tokens_details.cached_tokens` as vLLM does with
                         --enable-prompt-tokens-details: the longest prefix (in whole blocks, never the
                         whole prompt) shared with a sequence this rank served before

  --fail-reload          `POST /collective_rpc` answers 500 as vLLM does when a worker raises (a replica
                         that fails its weight reload)
  POST /collective_rpc {"method": "veri_server_process"}
                         what veri's worker extension answers: this process's id and start (a stand-in
                         started again on the same port is a restarted server)

Any other path answers 200 (so `/health` works). With no options and no PUT the reply is prebuilt
and nothing is recorded, so the bench measures the proxy, not this.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

import uvicorn

RANK_HEADER = b"x-data-parallel-rank"
PROCESS = {"id": uuid.uuid4().hex, "started_at": time.time()}  # as veri's worker extension answers


class Standin:
    def __init__(self, reply_ids: list[int], *, report_version: bool = True, prefix_block: int = 0,
                 record: bool = False, fail_reload: bool = False):
        self.reply_ids = reply_ids
        self.fail_reload = fail_reload
        self.report_version = report_version
        self.prefix_block = prefix_block
        self.shape: dict = {}
        self.shape_left: int | None = None
        self.requests: list[dict] = []
        self.served: dict[int | None, list[list[int]]] = {}  # rank -> sequences in its "prefix cache"
        self.prebuilt = None if prefix_block or record else json.dumps(self.reply({})).encode()

    def reply(self, shape: dict, prompt: list[int] | None = None, cached: int | None = None) -> dict:
        ids = self.reply_ids
        logprobs = {"null": None, "null_entry": {"token_logprobs": [None] + [-0.5] * (len(ids) - 1)}}.get(
            shape.get("logprobs", "ok"), {"token_logprobs": [-0.5] * len(ids)})
        usage = {"prompt_tokens": len(prompt or []), "completion_tokens": len(ids),
                 "total_tokens": len(prompt or []) + len(ids)}
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        body = {
            "id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "text": "", "token_ids": ids, "prompt_token_ids": None, "logprobs": logprobs,
                         "finish_reason": shape.get("finish_reason", "stop"), "stop_reason": None}],
            "usage": usage,
        }
        if self.report_version:
            body["policy_version"] = 0
        return body

    def complete(self, request: dict, rank: int | None) -> bytes:
        if self.prebuilt is not None and not self.shape:
            return self.prebuilt
        prompt = request["prompt"]
        self.requests.append({"rank": rank, "prompt": prompt, "fields": {k: v for k, v in request.items()
                                                                         if k != "prompt"}})
        cached = self._cached(prompt, rank) if self.prefix_block else None
        shape = self.shape
        if self.shape_left is not None:
            self.shape_left -= 1
            if self.shape_left <= 0:
                self.shape, self.shape_left = {}, None
        return json.dumps(self.reply(shape, prompt, cached)).encode()

    def _cached(self, prompt: list[int], rank: int | None) -> int:
        served = self.served.setdefault(rank, [])
        longest = 0
        for sequence in served:
            limit = min(len(sequence), len(prompt) - 1)
            shared = next((i for i in range(limit) if sequence[i] != prompt[i]), limit)
            longest = max(longest, shared)
        served.append(prompt + self.reply_ids)
        return longest // self.prefix_block * self.prefix_block

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
        path, method = scope["path"], scope["method"]
        status = 200
        if path == "/standin/reply" and method == "PUT":
            shape = json.loads(body)
            self.shape_left = shape.pop("times", None)
            self.shape = shape
            payload = b"{}"
        elif path == "/standin/requests":
            payload = json.dumps(self.requests).encode()
        elif path == "/v1/completions":
            rank = dict(scope["headers"]).get(RANK_HEADER)
            delay_s = self.shape.get("delay_s", 0)  # a slow policy: the harness's SDK times out and retries
            payload = self.complete(json.loads(body), int(rank) if rank is not None else None)
            await asyncio.sleep(delay_s)
        elif path == "/collective_rpc" and self.fail_reload:
            payload = b'{"error": "RuntimeError: the stand-in fails its weight reload"}'
            status = 500
        elif path == "/collective_rpc" and json.loads(body or b"{}").get("method") == "veri_server_process":
            payload = json.dumps({"results": [PROCESS]}).encode()
        else:
            payload = b"{}"
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def create_app(reply_ids: list[int], *, report_version: bool = True, prefix_block: int = 0,
               record: bool = False, fail_reload: bool = False) -> Standin:
    return Standin(reply_ids, report_version=report_version, prefix_block=prefix_block, record=record,
                   fail_reload=fail_reload)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply-ids", required=True, help="JSON list of token ids")
    parser.add_argument("--no-version", action="store_true", help="omit policy_version, as vLLM does")
    parser.add_argument("--prefix-cache", type=int, default=0, metavar="BLOCK",
                        help="report cached prompt tokens, vLLM-style, with this block size")
    parser.add_argument("--record", action="store_true", help="keep every request for GET /standin/requests")
    parser.add_argument("--fail-reload", action="store_true", help="answer 500 to POST /collective_rpc")
    args = parser.parse_args()
    app = create_app(json.loads(args.reply_ids), report_version=not args.no_version, prefix_block=args.prefix_cache,
                     record=args.record, fail_reload=args.fail_reload)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")

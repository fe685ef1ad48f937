"""veri.infra.http: the one JSON client, against MockTransport, an in-process app and a late server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from fastapi import FastAPI, Header
from pydantic import BaseModel

from testkit.servers import free_port
from veri.infra.http import AsyncJsonClient, HttpCallError, JsonClient

pytestmark = pytest.mark.needs("app")


class Reply(BaseModel):
    value: int


def mock(handler) -> httpx.MockTransport:
    return httpx.MockTransport(handler)


def test_json_in_json_out_with_the_bearer_token():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"echo": json.loads(request.content)})

    client = JsonClient("http://svc/", service="test service", token="s3cret", transport=mock(handler))
    assert client.call("POST", "/x", json={"a": 1}) == {"echo": {"a": 1}}
    assert client.call("POST", "/x", json=Reply(value=2)) == {"echo": {"value": 2}}
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    assert seen[1].headers["content-type"] == "application/json"
    assert str(seen[0].url) == "http://svc/x"


def test_no_token_no_header():
    client = JsonClient("http://svc", service="s", transport=mock(lambda r: httpx.Response(200, json=dict(r.headers))))
    assert "authorization" not in client.call("GET", "/h")


class ServiceError(HttpCallError):
    pass


def test_a_refusal_names_service_url_status_detail_and_fix():
    client = JsonClient("http://svc", service="capture proxy", error=ServiceError,
                        transport=mock(lambda r: httpx.Response(401, text="bad token")))
    with pytest.raises(ServiceError) as caught:
        client.call("PUT", "/control/policy_version", json={"version": 1})
    error = caught.value
    assert (error.status, error.method, error.path) == (401, "PUT", "/control/policy_version")
    assert str(error) == ("capture proxy at http://svc: PUT /control/policy_version -> 401: bad token;"
                          " check the token (VERI_CONTROL_TOKEN)")


def test_a_non_json_answer_is_an_error():
    client = JsonClient("http://svc", service="s", transport=mock(lambda r: httpx.Response(200, text="<html>")))
    with pytest.raises(HttpCallError, match="not JSON.*is this URL really that service"):
        client.call("GET", "/")


def test_unreachable_says_so_with_the_fix():
    client = JsonClient(f"http://127.0.0.1:{free_port()}", service="policy server",
                        unreachable_fix="start it first (make up)")
    with pytest.raises(HttpCallError) as caught:
        client.call("GET", "/policy_version")
    assert caught.value.status is None
    assert "policy server at http://127.0.0.1:" in str(caught.value)
    assert "unreachable (ConnectError" in str(caught.value) and str(caught.value).endswith("start it first (make up)")


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_connect_failures_are_retried_until_the_server_is_up():
    port = free_port()
    servers = []

    def start_late() -> None:
        time.sleep(0.3)
        server = HTTPServer(("127.0.0.1", port), _Ok)
        servers.append(server)
        server.serve_forever()

    thread = threading.Thread(target=start_late, daemon=True)
    thread.start()
    try:
        # backoff 0, 0.5, 1 s: the third try finds the server
        assert JsonClient(f"http://127.0.0.1:{port}", service="s", retries=3).call("GET", "/") == {"ok": True}
    finally:
        while not servers:
            time.sleep(0.05)
        servers[0].shutdown()
    with pytest.raises(HttpCallError, match="unreachable"):
        JsonClient(f"http://127.0.0.1:{free_port()}", service="s", retries=0).call("GET", "/")


def test_async_client_against_an_app_in_process():
    app = FastAPI()

    @app.post("/v1/things")
    async def things(body: Reply, authorization: str = Header(default="")) -> dict:
        return {"value": body.value + 1, "auth": authorization}

    async def calls() -> tuple[dict, HttpCallError]:
        transport = httpx.ASGITransport(app=app)
        async with AsyncJsonClient("http://app", service="app", token="t", transport=transport) as client:
            ok = await client.call("POST", "/v1/things", json=Reply(value=1), params={"subdir": "x"})
            with pytest.raises(HttpCallError) as caught:
                await client.call("POST", "/v1/things", json={"value": "not a number"})
            return ok, caught.value

    ok, refused = asyncio.run(calls())
    assert ok == {"value": 2, "auth": "Bearer t"}
    assert refused.status == 422 and "value" in refused.detail

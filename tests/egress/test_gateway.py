"""The egress gateway (veri/egress/gateway.py) as a real server on this machine, driven by real clients
(urllib through HTTP_PROXY-style proxy URLs, raw CONNECT): a request goes through only with a pass the
key signed, only to hosts the pass names, never to loopback, link-local or the host's own address."""

from __future__ import annotations

import asyncio
import base64
import http.server
import ipaddress
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from veri.core import egress
from veri.services.egress.gateway import Gateway, Routes

KEY = b"k" * 32


def outward_address() -> str:
    """This machine's address on its default route (not loopback: the gateway refuses loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source address
        except OSError:
            pytest.skip("no default route on this machine")
        return s.getsockname()[0]


class Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"origin saw {self.path} host={self.headers['Host']} auth={self.headers['Proxy-Authorization']}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[tuple[str, int]]:
    address = outward_address()
    server = http.server.ThreadingHTTPServer((address, 0), Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield address, server.server_address[1]
    server.shutdown()


def start_gateway(routes: Routes) -> Iterator[int]:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, asyncio.Server] = {}

    async def main() -> None:
        holder["server"] = await Gateway(KEY, routes).serve("127.0.0.1", 0)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(main()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield holder["server"].sockets[0].getsockname()[1]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.fixture(scope="module")
def gateway(origin) -> Iterator[int]:
    """Open mode reaches the origin's address as the stack's own network (a /32 of it)."""
    yield from start_gateway(Routes(local_networks=[ipaddress.ip_network(f"{origin[0]}/32")]))


def fetch(port: int, url: str, token: str | None) -> tuple[int, str]:
    credentials = f"veri:{token}@" if token is not None else ""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{credentials}127.0.0.1:{port}"}))
    try:
        with opener.open(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def connect(port: int, target: str, token: str) -> tuple[str, socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = base64.b64encode(f"veri:{token}".encode()).decode()
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head.decode(errors="replace"), sock


def test_open_pass_reaches_the_origin_and_no_pass_is_refused(gateway, origin):
    host, port = origin
    status, body = fetch(gateway, f"http://{host}:{port}/page", egress.sign_pass(KEY, [egress.ANY_HOST]))
    assert status == 200 and body.startswith("origin saw /page") and "auth=None" in body, body
    status, body = fetch(gateway, f"http://{host}:{port}/page", None)
    assert status == 407 and "no valid egress pass" in body, body


def test_forged_or_tampered_pass_is_refused(gateway, origin):
    host, port = origin
    forged = egress.sign_pass(b"x" * 32, [egress.ANY_HOST])
    assert fetch(gateway, f"http://{host}:{port}/", forged)[0] == 407
    narrow = egress.sign_pass(KEY, ["example.org"])
    widened = egress.sign_pass(KEY, [egress.ANY_HOST]).split(".")[0] + "." + narrow.split(".")[1]
    assert fetch(gateway, f"http://{host}:{port}/", widened)[0] == 407


def test_allowlist_names_the_host_or_refuses_with_the_fix(gateway, origin):
    host, port = origin
    assert fetch(gateway, f"http://{host}:{port}/x", egress.sign_pass(KEY, [f"{host}:{port}"]))[0] == 200
    status, body = fetch(gateway, f"http://{host}:{port}/x", egress.sign_pass(KEY, ["pypi.org"]))
    assert status == 403 and "not in this bundle's egress list" in body and "veri-harness.toml" in body, body
    status, _ = fetch(gateway, f"http://{host}:{port}/x", egress.sign_pass(KEY, [f"{host}:{port + 1}"]))
    assert status == 403


def test_connect_pipes_bytes_to_an_allowed_host(gateway, origin):
    host, port = origin
    head, sock = connect(gateway, f"{host}:{port}", egress.sign_pass(KEY, [egress.ANY_HOST]))
    with sock:
        assert head.startswith("HTTP/1.1 200"), head
        sock.sendall(f"GET /tunnel HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert b"origin saw /tunnel" in answer


@pytest.mark.parametrize("target", ["169.254.169.254:80", "127.0.0.1:22", "[::1]:80", "0.0.0.0:80"])
def test_metadata_loopback_and_unspecified_are_never_reached(gateway, target):
    for hosts in ([egress.ANY_HOST], [target.rsplit(":", 1)[0].strip("[]")]):
        head, sock = connect(gateway, target, egress.sign_pass(KEY, hosts))
        sock.close()
        assert head.startswith("HTTP/1.1 403"), (target, hosts, head)


def test_open_mode_refuses_the_host_and_private_addresses_outside_the_stack(origin):
    host, port = origin
    for routes in (Routes(host_addresses={ipaddress.ip_address(host)}), Routes()):
        for gateway in start_gateway(routes):
            status, body = fetch(gateway, f"http://{host}:{port}/", egress.sign_pass(KEY, [egress.ANY_HOST]))
            if routes.host_addresses:
                assert status == 403 and "the host's own address" in body, body
            elif not ipaddress.ip_address(host).is_global:
                assert status == 403 and "private address" in body, body
            else:  # a box whose outward address is public: open mode reaches it, as it reaches the web
                assert status == 200 and body.startswith("origin saw /"), body


def test_routes_from_the_route_table():
    table = ("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
             "eth2\t00000000\t010013AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
             "eth0\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
             "eth2\t000013AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")
    routes = Routes.read(table)
    assert routes.local_networks == [ipaddress.ip_network("172.18.0.0/16")]
    assert routes.host_addresses == {ipaddress.ip_address("172.19.0.1")}


def test_host_matching():
    assert egress.host_allowed(["*.example.com"], "api.example.com", 443)
    assert not egress.host_allowed(["*.example.com"], "example.com.evil.io", 443)
    assert not egress.host_allowed(["*.example.com"], "notexample.com", 443)
    assert egress.host_allowed(["pypi.org"], "PyPI.org.", 80)
    assert not egress.host_allowed(["pypi.org:443"], "pypi.org", 80)

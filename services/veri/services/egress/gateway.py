"""The egress gateway: the one way out of the sandbox networks, a forward proxy (CONNECT and plain HTTP)
that forwards a request only with a pass the launcher signed (core/egress.py).

Each sandbox of an `open` or allowlist bundle gets `HTTP(S)_PROXY=http://veri:<pass>@<gateway>:3128`.
The pass names the hosts its bundle may reach (open: any name). Whatever the name, the address it
resolves to is checked too, and the connection goes to that checked address (no second lookup a
DNS answer could change):
  - never: loopback, link-local (169.254.169.254, the cloud metadata service), multicast, unspecified,
    and this gateway's default gateway (the host's address on the way out);
  - open: public addresses, and the stack's own networks (the subnets of this gateway's other
    interfaces: the proxy, the web fixture); a private address elsewhere (the host's, the LAN's) is
    refused unless an allowlist names it;
  - allowlist: what the list names, wherever it is.
Plain HTTP is forwarded with `Connection: close` (one request per connection: a kept-alive
connection cannot be reused for another host); CONNECT is a byte pipe after the 200.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog

from veri.core import egress

log = structlog.get_logger("veri.egress")

MAX_HEAD_BYTES = 32 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
PIPE_CHUNK = 64 * 1024
HOP_HEADERS = {"proxy-authorization", "proxy-connection", "connection", "keep-alive"}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Routes:
    """What the gateway learns from its own network setup (/proc/net/route)."""

    local_networks: list[IPNetwork] = field(default_factory=list)  # the stack's side (not the way out)
    host_addresses: set[IPAddress] = field(default_factory=set)  # default gateways: the host

    @classmethod
    def read(cls, route_table: str | None = None) -> Routes:
        if route_table is None:
            try:
                with open("/proc/net/route") as f:
                    route_table = f.read()
            except OSError:
                return cls()
        links: list[tuple[str, IPNetwork]] = []
        out_ifaces: set[str] = set()
        hosts: set[IPAddress] = set()
        for line in route_table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 8:
                continue
            iface, dest, gateway, mask = fields[0], _hex_ip(fields[1]), _hex_ip(fields[2]), _hex_ip(fields[7])
            if int(dest) == 0 and int(mask) == 0:
                out_ifaces.add(iface)
                hosts.add(gateway)
            elif int(gateway) == 0:
                links.append((iface, ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)))
        return cls(local_networks=[net for iface, net in links if iface not in out_ifaces], host_addresses=hosts)


def _hex_ip(value: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(bytes.fromhex(value)[::-1])


def refusal(address: IPAddress, *, named: bool, routes: Routes) -> str | None:
    """Why this address may not be reached (None: it may). `named`: an allowlist entry named the host."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified or address.is_multicast:
        return f"{address} is a loopback/unspecified/multicast address"
    if address.is_link_local:
        return f"{address} is link-local (the cloud metadata service lives there)"
    if address in routes.host_addresses:
        return f"{address} is the host's own address"
    if named or address.is_global or any(address in net for net in routes.local_networks):
        return None
    return (f"{address} is a private address outside the stack (the host's or the LAN's): an open bundle "
            "reaches the public internet only; name the host in the bundle's egress list to allow it")


class Gateway:
    def __init__(self, key: bytes, routes: Routes | None = None) -> None:
        self.key = key
        self.routes = routes or Routes.read()

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self.handle, host, port, limit=MAX_HEAD_BYTES)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            try:
                await self._forward(head, reader, writer)
            except Refused as refused:
                log.info("egress.refused", peer=peer and peer[0], reason=refused.reason, status=refused.status)
                await _answer(writer, refused.status, refused.reason)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _forward(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, version = request_line.split(" ")
        except ValueError:
            raise Refused(400, "not an HTTP proxy request") from None
        headers = [line.split(":", 1) for line in header_lines if ":" in line]
        hosts = self._pass_hosts(headers)
        if method.upper() == "CONNECT":
            host, port = _split_host_port(target, default=443)
            upstream_reader, upstream_writer = await self._open(hosts, host, port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            if not target.lower().startswith("http://"):
                raise Refused(400, f"{target[:200]!r}: a forward proxy takes absolute http:// URLs or CONNECT")
            authority, _, path = target[len("http://"):].partition("/")
            host, port = _split_host_port(authority.rpartition("@")[2], default=80)
            upstream_reader, upstream_writer = await self._open(hosts, host, port)
            kept = [f"{name}:{value}" for name, value in headers if name.strip().lower() not in HOP_HEADERS]
            upstream_writer.write(("\r\n".join([f"{method} /{path} {version}", *kept, "Connection: close"])
                                   + "\r\n\r\n").encode("latin-1"))
        await _pipe_both(reader, writer, upstream_reader, upstream_writer)

    def _pass_hosts(self, headers: Iterable[list[str]]) -> list[str]:
        for name, value in headers:
            if name.strip().lower() != "proxy-authorization":
                continue
            scheme, _, credentials = value.strip().partition(" ")
            if scheme.lower() != "basic":
                break
            try:
                _, _, token = base64.b64decode(credentials.strip()).decode().partition(":")
            except ValueError:
                break
            hosts = egress.read_pass(self.key, token)
            if hosts is not None:
                return hosts
            break
        raise Refused(407, "no valid egress pass: this gateway forwards only for veri's sandboxes, through the "
                           "HTTP(S)_PROXY the launcher sets")

    async def _open(self, hosts: list[str], host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        named = egress.ANY_HOST not in hosts
        if not egress.host_allowed(hosts, host, port):
            raise Refused(403, f"{host}:{port} is not in this bundle's egress list ({', '.join(hosts)}): add it "
                               "to egress in veri-harness.toml and rebuild the bundle")
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Refused(502, f"{host}: cannot resolve ({exc})") from None
        reasons, tried = [], 0
        for family, _, _, _, sockaddr in infos:
            address = ipaddress.ip_address(sockaddr[0])
            why = refusal(address, named=named, routes=self.routes)
            if why is not None:
                reasons.append(why)
                continue
            tried += 1
            try:
                return await asyncio.wait_for(asyncio.open_connection(str(address), port, family=family),
                                              CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                reasons.append(f"{address}:{port}: {exc or type(exc).__name__}")
        raise Refused(502 if tried else 403, f"{host}: " + "; ".join(dict.fromkeys(reasons)))


def _split_host_port(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = authority.partition(":")
    try:
        return host, int(port) if port else default
    except ValueError:
        raise Refused(400, f"{authority[:200]!r}: not host:port") from None


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    titles = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}
    body = f"veri egress gateway: {reason}\n".encode()
    extra = 'Proxy-Authenticate: Basic realm="veri-egress"\r\n' if status == 407 else ""
    writer.write(f"HTTP/1.1 {status} {titles.get(status, 'Error')}\r\nContent-Type: text/plain\r\n{extra}"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    try:
        await writer.drain()
    except ConnectionError:
        pass


async def _pipe_both(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                     upstream_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter) -> None:
    try:
        await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))
    finally:
        upstream_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(PIPE_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def run(host: str, port: int, key: bytes) -> None:
    gateway = Gateway(key)
    server = await gateway.serve(host, port)
    log.info("egress.listening", host=host, port=port,
             local_networks=[str(n) for n in gateway.routes.local_networks],
             host_addresses=sorted(str(a) for a in gateway.routes.host_addresses))
    async with server:
        await server.serve_forever()

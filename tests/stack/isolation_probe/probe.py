"""Run inside a sandbox (tests/stack/test_isolation.py): try every way out the task names and write what
happened to $VERI_OUTPUT_DIR/probe.json. An attempt is "REACHED ..." or "blocked: <why>"; the test
decides which must be blocked. Stdlib only: it runs in veri/base as any harness would."""

import base64
import glob
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TIMEOUT = 3
task = json.loads(os.environ["VERI_TASK"])
gateway_url = os.environ.get("HTTP_PROXY", "")


def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=TIMEOUT).close()
        return f"REACHED {host}:{port}"
    except OSError as error:
        return f"blocked: {error}"


def via_gateway(host, port):
    """CONNECT through the gateway in HTTP_PROXY with this sandbox's own pass."""
    if not gateway_url:
        return "blocked: no gateway (no HTTP_PROXY)"
    proxy = urllib.parse.urlsplit(gateway_url)
    auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    try:
        with socket.create_connection((proxy.hostname, proxy.port), timeout=TIMEOUT) as sock:
            sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                         f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
            sock.settimeout(20)
            line = sock.recv(4096).decode(errors="replace").split("\r\n", 1)[0]
    except OSError as error:
        return f"blocked: gateway {error}"
    return f"REACHED {host}:{port} ({line})" if " 200 " in line + " " else f"blocked: gateway said {line}"


def http(url, headers=None, method="GET", body=None, use_proxy=False):
    """Status of a request; direct unless use_proxy (then through HTTP_PROXY, as most clients would)."""
    handlers = [] if use_proxy else [urllib.request.ProxyHandler({})]
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=20) as answer:
            return f"REACHED {answer.status}"
    except urllib.error.HTTPError as error:
        return f"REACHED {error.code}" if error.code < 300 else f"blocked: {error.code}"
    except OSError as error:
        return f"blocked: {error}"


own_proxy = os.environ["ANTHROPIC_BASE_URL"].rsplit("/r/", 1)[0]


def filled(text):
    return (text.replace("$PROXY", own_proxy).replace("$OWN_ID", os.environ["VERI_ROLLOUT_ID"])
            .replace("$OWN_KEY", os.environ["OPENAI_API_KEY"]))


attempts = {}
jobs = {}
with ThreadPoolExecutor(64) as pool:
    for name, host, port in task.get("tcp", []):
        jobs[f"{name} direct"] = pool.submit(tcp, host, port)
        jobs[f"{name} via gateway"] = pool.submit(via_gateway, host, port)
    for name, url, headers, method in task.get("http", []):
        headers = {key: filled(value) for key, value in headers.items()}
        jobs[name] = pool.submit(http, filled(url), headers, method, b"{}" if method in ("POST", "PUT") else None)
    for name, url in task.get("http_via_gateway", []):
        jobs[name] = pool.submit(http, url, None, "GET", None, True)
    attempts = {name: job.result() for name, job in jobs.items()}

# The docker socket, anywhere a client looks for it; any socket at all under /var/run and /run.
sockets = sorted({p for p in glob.glob("/var/run/**", recursive=True) + glob.glob("/run/**", recursive=True)
                  if os.path.exists(p) and not os.path.isdir(p) and os.stat(p).st_mode & 0o170000 == 0o140000})
attempts["docker socket file"] = ("REACHED /var/run/docker.sock" if os.path.exists("/var/run/docker.sock")
                                  else "blocked: no /var/run/docker.sock")
attempts["any socket under /var/run or /run"] = f"REACHED {sockets}" if sockets else "blocked: none"
for path in task.get("archive_paths", []):
    attempts[f"archive path {path}"] = f"REACHED {path}" if os.path.exists(path) else "blocked: not there"
mounts = open("/proc/mounts").read()
attempts["archive mounted"] = next((f"REACHED {line}" for line in mounts.splitlines()
                                    if any(m in line for m in task.get("archive_markers", []))), "blocked: no mount")
environs = []
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        environs.append(open(path, "rb").read().decode(errors="replace"))
    except OSError:
        pass

result = {"attempts": attempts, "env": sorted(os.environ), "environs": environs,
          "proxy_variables": {k: bool(os.environ.get(k)) for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy")}}
json.dump(result, open(os.path.join(os.environ["VERI_OUTPUT_DIR"], "probe.json"), "w"), indent=1)

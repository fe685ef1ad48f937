"""A real Kubernetes 1.20 control plane for tests: etcd + apiserver + controller-manager + scheduler.

The binaries are built from Debian's source package by scripts/k8s/build.sh into build/k8s/bin/
(`make k8s`; `make test` starts that build in the background and `wait_for_build` waits for it).
Everything runs on loopback with a self-signed serving certificate and a static admin token; nothing
outside the temporary folder is written, and `stop()` ends the processes by their PIDs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import kubernetes.client

REPO = Path(__file__).resolve().parents[1]
K8S_BUILD = REPO / "build" / "k8s"
K8S_BIN = K8S_BUILD / "bin"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
SIM_NODE = "sim-node-0"
RUNTIME_CLASS = "gvisor"  # what a cluster for veri must have (docs/kubernetes.md): handled by runsc on the nodes
# Alpha in 1.20: Job ttlSecondsAfterFinished (the launcher may use it as a backstop for cleanup).
FEATURE_GATES = "TTLAfterFinished=true"
# The controller-manager's informer resync (--min-resync-period; each comes after 1-2x this). 1.20's Job
# controller checks activeDeadlineSeconds from one timer, armed by the sync that first sees no
# status.startTime. On a loaded box a second sync can still read the Job from a stale cache: it arms a
# later startTime, writes it, and its timer is merged into the first one, which then finds the deadline
# not passed; nothing looks again until a pod changes or a resync (12-24 h by default). The log then
# shows two "will sync after" lines for the Job. Later releases requeue at the remaining deadline on
# every sync; here the resync bounds the delay. (The launcher has its own backstop: DEADLINE_GRACE_S.)
RESYNC_PERIOD_S = 5


class BuildUnavailable(RuntimeError):
    """The binaries are not there and no build is running (`make k8s` builds them)."""


@dataclass
class KubeCluster:
    kubeconfig: Path  # admin kubeconfig (token auth, the self-signed CA)
    server: str  # https://127.0.0.1:PORT
    kubectl: list[str]  # [kubectl 1.20, "--kubeconfig", kubeconfig]
    nodes: list[str] = field(default_factory=list)
    log_dir: Path | None = None  # the control plane's folder: one <component>.log each

    def api_client(self) -> kubernetes.client.ApiClient:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def log_tail(self, component: str, lines: int = 40, mentioning: str = "") -> str:
        """The last lines of a component's log (only those naming `mentioning`, if given): for failure messages."""
        if self.log_dir is None:
            return "(no logs: not a ControlPlane cluster)"
        log = self.log_dir / f"{component}.log"
        if not log.exists():
            return f"(no {log})"
        kept = [line for line in log.read_text(errors="replace").splitlines() if mentioning in line]
        return "\n".join(kept[-lines:]) or f"(nothing in {log.name} mentions {mentioning!r})"


def build_log_tail(lines: int = 30) -> str:
    log = K8S_BUILD / "build.log"
    if not log.exists():
        return "(no build/k8s/build.log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def binaries_missing() -> list[str]:
    return [name for name in BINARIES if not os.access(K8S_BIN / name, os.X_OK)]


def wait_for_build(timeout: float) -> None:
    """Wait while scripts/k8s/build.sh holds its lock (make test runs it in the background), then check.

    Raises BuildUnavailable when binaries are missing afterwards, TimeoutError when the build is still
    running after `timeout` seconds; both carry the build log's tail.
    """
    lock_path = K8S_BUILD / ".lock"
    deadline = time.monotonic() + timeout
    if lock_path.exists():
        with lock_path.open("a") as lock:
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"scripts/k8s/build.sh still running after {timeout:.0f} s; its log ends:\n"
                            + build_log_tail()
                        ) from None
                    time.sleep(2)
    missing = binaries_missing()
    if missing:
        raise BuildUnavailable(
            f"{', '.join(missing)} not in {K8S_BIN} (run `make k8s`); build/k8s/build.log ends:\n" + build_log_tail()
        )


def wait_for(what: str, check, timeout: float = 120.0, every: float = 0.2):  # type: ignore[no-untyped-def]
    """Poll `check()` until it returns something truthy; that value is returned. The default budget is
    for a loaded 2-core box (the wait ends with the event, so a quiet one never spends it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _wait_until(what: str, ready: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes],
                log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; its log ends:\n{_tail(log)}")
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s; its log ends:\n{_tail(log)}")


def _tail(log: Path, lines: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler in a temp folder, on free ports.

    `extra_addresses`: this host's addresses the apiserver also answers on (it then listens on all of
    them, and its certificate names them): a launcher in a container reaches it there (test_kubelet_stack.py).
    """

    def __init__(self, extra_addresses: tuple[str, ...] = ()) -> None:
        self.extra_addresses = extra_addresses
        self.dir = Path(tempfile.mkdtemp(prefix="veri-k8s-"))
        self.token = secrets.token_hex(16)
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.cert = self.dir / "serving.crt"
        self.key = self.dir / "serving.key"

    # -- processes ----------------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], cwd: Path | None = None) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.dir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=cwd or self.dir, start_new_session=True)
        self.processes.append((name, proc))
        return proc, log

    def start(self) -> KubeCluster:
        try:
            self._write_credentials()
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
        except BaseException:
            self.stop()
            raise
        return KubeCluster(self.kubeconfig, self.server,
                           [str(K8S_BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig)], log_dir=self.dir)

    def _write_credentials(self) -> None:
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=veri-test-apiserver",
                 "-addext", ",".join(["subjectAltName=IP:127.0.0.1", *(f"IP:{a}" for a in self.extra_addresses),
                                      "DNS:localhost", "DNS:kubernetes.default.svc"]),
                 "-keyout", str(self.key), "-out", str(self.cert))
        _openssl("genrsa", "-out", str(self.dir / "sa.key"), "2048")
        _openssl("rsa", "-in", str(self.dir / "sa.key"), "-pubout", "-out", str(self.dir / "sa.pub"))
        (self.dir / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: veri-test\n  cluster:\n    server: {self.server}\n"
            f"    certificate-authority: {self.cert}\n"
            f"users:\n- name: admin\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: veri-test\n  context:\n    cluster: veri-test\n    user: admin\n"
            "current-context: veri-test\n"
        )
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc, log = self._spawn("etcd", [
            str(K8S_BIN / "etcd"), "--name", "veri-test", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}", "--initial-cluster", f"veri-test=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        _wait_until("etcd", lambda: b'"health":"true"' in urllib.request.urlopen(
            f"{self.etcd_url}/health", timeout=2).read(), 30, proc, log)

    def _start_apiserver(self) -> None:
        proc, log = self._spawn("kube-apiserver", [
            str(K8S_BIN / "kube-apiserver"), "--etcd-servers", self.etcd_url,
            "--bind-address", "0.0.0.0" if self.extra_addresses else "127.0.0.1",
            "--advertise-address", "127.0.0.1", "--secure-port", str(self.port),
            "--insecure-port", "0", "--tls-cert-file", str(self.cert), "--tls-private-key-file", str(self.key),
            "--token-auth-file", str(self.dir / "tokens.csv"), "--authorization-mode", "Node,RBAC",
            "--service-account-key-file", str(self.dir / "sa.pub"),
            "--service-account-signing-key-file", str(self.dir / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-cluster-ip-range", "10.96.0.0/24",
            "--runtime-config", "node.k8s.io/v1=true,networking.k8s.io/v1=true",
            "--feature-gates", FEATURE_GATES,
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
            "--cert-dir", str(self.dir / "apiserver-certs"), "--v", "1",
        ])
        context = ssl.create_default_context(cafile=str(self.cert))

        def ready() -> bool:
            request = urllib.request.Request(f"{self.server}/readyz",
                                             headers={"Authorization": f"Bearer {self.token}"})
            return urllib.request.urlopen(request, timeout=2, context=context).read() == b"ok"

        _wait_until("kube-apiserver", ready, 180, proc, log)  # ~5 s on quiet cores; much more at load 100

    def _start_controllers(self) -> None:
        self._spawn("kube-controller-manager", [
            str(K8S_BIN / "kube-controller-manager"), "--kubeconfig", str(self.kubeconfig),
            "--leader-elect=false", "--port", "0", "--secure-port", "0",
            # The token controller (service-account tokens) and the Job controller need the signing key.
            "--service-account-private-key-file", str(self.dir / "sa.key"), "--root-ca-file", str(self.cert),
            "--use-service-account-credentials=false", "--feature-gates", FEATURE_GATES,
            "--min-resync-period", f"{RESYNC_PERIOD_S}s",
            # Each Job sync and deadline timer in the log (what a test that waits on a Job shows when it fails).
            "--v", "1", "--vmodule", "job_controller=4",
        ])
        self._spawn("kube-scheduler", [
            str(K8S_BIN / "kube-scheduler"), "--kubeconfig", str(self.kubeconfig),
            "--leader-elect=false", "--port", "0", "--secure-port", "0", "--v", "1",
        ])
        # Both have nothing to poll over HTTP with their ports off; a crash shows in check_alive().
        time.sleep(0.5)
        self.check_alive()

    def spawn_node_simulator(self, node: str = SIM_NODE) -> None:
        """tests/kubernetes/nodesim.py as its own process (run from the repo root: it imports tests.*)."""
        self._spawn(f"nodesim-{node}", [
            sys.executable, "-m", "tests.kubernetes.nodesim", "--kubeconfig", str(self.kubeconfig),
            "--node", node, "--cert", str(self.cert), "--key", str(self.key),
        ], cwd=REPO)

    def check_alive(self) -> None:
        for name, proc in self.processes:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; its log ends:\n"
                                   f"{_tail(self.dir / f'{name}.log')}")

    def log(self, name: str) -> str:
        return _tail(self.dir / f"{name}.log", 200)

    def stop(self) -> None:
        """Stop every process by its PID, then remove the folder."""
        self.stop_processes()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop_processes(self) -> None:
        """Newest first: the node and the controllers before the apiserver, etcd last."""
        for _name, proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in reversed(self.processes):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.processes.clear()


# -- the real-kubelet tier ---------------------------------------------------------------------------------

PAUSE_IMAGE = "veri-test/k8s-pause:3.2"
KUBELET_NODE = "kubelet-node-0"
# The kubelet always writes pod logs here (not under --root-dir); the test's own entries are removed.
POD_LOG_DIRS = (Path("/var/log/pods"), Path("/var/log/containers"))
# One kubelet per Docker daemon: a kubelet garbage-collects every Kubernetes-labelled container and
# pod log folder it does not know, so two test sessions' kubelets would kill each other's pods.
HOST_LOCK = Path("/run/lock/veri-k8s-kubelet.lock")


class KubeletUnavailable(RuntimeError):
    """This host cannot run the real-kubelet tier (the message says what is missing)."""


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def host_ip() -> str:
    """The address of the default route's interface: the kubelet refuses a loopback node IP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("10.255.255.255", 1))  # UDP: nothing is sent
        return str(sock.getsockname()[0])


def pod_network_gateway() -> str:
    """This host's address on the network the kubelet's pods get: with no CNI, dockershim starts each
    pod's sandbox in Docker's default `bridge` network (docker0), so the host is its gateway there."""
    import psutil

    bridge = json.loads(_docker("network", "inspect", "bridge").stdout)[0]
    gateway = next((c["Gateway"] for c in bridge["IPAM"]["Config"] or [] if c.get("Gateway")), "")
    if gateway:
        return str(gateway)
    # dockerd 20.10 leaves the default bridge's Gateway out of IPAM where it found docker0 already up
    # (a restart, or another dockerd before it): the interface's own address is the gateway.
    interface = (bridge.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    for address in psutil.net_if_addrs().get(interface, []):
        if address.family == socket.AF_INET:
            return str(address.address)
    raise KubeletUnavailable(f"Docker's bridge network names no gateway and {interface} has no IPv4 address")


class KubeletNode:
    """Our patched kubelet 1.20 (scripts/k8s/patches) on the host's Docker, RuntimeClass handlers -> --runtime.

    Everything it writes lives in its own root dir except /var/log/pods and /var/log/containers (fixed in
    the kubelet); stop() removes its containers, its mounts, those log entries and its folder.
    """

    def __init__(self, plane: ControlPlane, name: str = KUBELET_NODE) -> None:
        self.plane = plane
        self.name = name
        self.root = plane.dir / "kubelet"
        self.preexisting_logs: set[Path] = set()
        self.preexisting_containers: set[str] = set()
        self.imported_pause = False
        self.lock: IO[str] | None = None

    @staticmethod
    def check_host() -> str:
        """What this host lacks for the tier, as KubeletUnavailable; else Docker's cgroup driver."""
        if os.geteuid() != 0:
            raise KubeletUnavailable("the kubelet needs root (mounts, cgroups, the Docker socket)")
        if shutil.which("docker") is None:
            raise KubeletUnavailable("no docker CLI (`make docker`)")
        info = _docker("info", "--format", "{{json .Runtimes}} {{.CgroupDriver}}", check=False)
        if info.returncode != 0:
            raise KubeletUnavailable(f"dockerd not reachable (`make docker`): {info.stderr.strip()}")
        runtimes, _, driver = info.stdout.strip().rpartition(" ")
        if '"runsc"' not in runtimes:
            raise KubeletUnavailable("Docker has no `runsc` runtime (`make docker` registers gVisor)")
        for name in ("kubelet", "pause"):
            if not os.access(K8S_BIN / name, os.X_OK):
                raise KubeletUnavailable(f"{K8S_BIN / name} not built (`make k8s`)")
        return driver

    def _import_pause_image(self) -> None:
        if _docker("image", "inspect", PAUSE_IMAGE, check=False).returncode == 0:
            return
        self.imported_pause = True
        layer = self.plane.dir / "pause.tar"
        subprocess.run(["tar", "-C", str(K8S_BIN), "-cf", str(layer), "pause"], check=True)
        _docker("import", "--change", 'ENTRYPOINT ["/pause"]', str(layer), PAUSE_IMAGE)

    def _k8s_containers(self) -> set[str]:
        deadline = time.monotonic() + 120  # dockerd may be restarting (make docker: live-restore)
        while True:
            listed = _docker("ps", "-aq", "--no-trunc", "--filter", "label=io.kubernetes.docker.type", check=False)
            if listed.returncode == 0 or time.monotonic() > deadline:
                listed.check_returncode()
                return set(listed.stdout.split())
            time.sleep(2)

    def _lock_host(self, timeout: float) -> None:
        HOST_LOCK.parent.mkdir(parents=True, exist_ok=True)
        self.lock = HOST_LOCK.open("a")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.lock.close()
                    raise KubeletUnavailable(
                        f"another session's kubelet holds this host's Docker ({HOST_LOCK}) for over {timeout:.0f} s"
                    ) from None
                time.sleep(1)

    def start(self, lock_timeout: float = 600) -> None:
        cgroup_driver = self.check_host()
        self._lock_host(lock_timeout)  # from here on stop() cleans up
        self._import_pause_image()
        self.preexisting_containers = self._k8s_containers()
        self.preexisting_logs = {p for d in POD_LOG_DIRS if d.exists() for p in d.iterdir()}
        self.root.mkdir()
        port = free_port()
        self.plane._spawn("kubelet", [
            str(K8S_BIN / "kubelet"), "--kubeconfig", str(self.plane.kubeconfig),
            "--hostname-override", self.name, "--node-ip", host_ip(),
            "--container-runtime", "docker", "--pod-infra-container-image", PAUSE_IMAGE,
            "--root-dir", str(self.root), "--cert-dir", str(self.root / "pki"),
            "--experimental-dockershim-root-directory", str(self.root / "dockershim"),
            "--volume-plugin-dir", str(self.root / "volume-plugins"),
            "--tls-cert-file", str(self.plane.cert), "--tls-private-key-file", str(self.plane.key),
            "--port", str(port), "--read-only-port", "0", "--healthz-port", "0",
            # The apiserver fetches logs without a client certificate.
            "--anonymous-auth=true", "--authorization-mode", "AlwaysAllow",
            "--cgroup-driver", cgroup_driver,
            # Leave the shared host alone: no QoS cgroup tree, no iptables chains, no negative OOM scores,
            # no image garbage collection (other people's images), no evictions on a full-ish disk.
            "--cgroups-per-qos=false", "--enforce-node-allocatable=", "--make-iptables-util-chains=false",
            "--hairpin-mode", "none", "--oom-score-adj", "0", "--fail-swap-on=false",
            "--image-gc-high-threshold", "100", "--image-gc-low-threshold", "99", "--eviction-hard=",
            "--serialize-image-pulls=false", "--v", "1",
        ])

    def stop(self) -> None:
        """After the kubelet's process is gone: its containers, mounts, log entries and folder."""
        if self.lock is None:
            return  # never started: what is on this host is someone else's
        for container in self._k8s_containers() - self.preexisting_containers:
            _docker("rm", "-f", "-v", container, check=False)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if line.split()[1].startswith(str(self.root))]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        for log_dir in POD_LOG_DIRS:
            if not log_dir.exists():
                continue
            for entry in set(log_dir.iterdir()) - self.preexisting_logs:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                log_dir.rmdir()  # only when empty: it was ours
        shutil.rmtree(self.root, ignore_errors=True)
        if self.imported_pause:
            _docker("rmi", PAUSE_IMAGE, check=False)
        if self.lock is not None:
            self.lock.close()  # releases the host lock
            self.lock = None


def create_runtime_class(cluster: KubeCluster) -> None:
    """The `gvisor` RuntimeClass, handler runsc."""
    from kubernetes import client

    client.NodeV1Api(cluster.api_client()).create_runtime_class(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS},
         "handler": "runsc"})


def wait_node_ready(plane: ControlPlane, cluster: KubeCluster, node: str, timeout: float) -> None:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())

    def node_ready() -> bool:
        plane.check_alive()
        nodes = core.list_node(field_selector=f"metadata.name={node}").items
        conditions = nodes[0].status.conditions or [] if nodes else []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    wait_for(f"node {node} Ready", node_ready, timeout=timeout, every=0.5)


@contextlib.contextmanager
def kubelet_cluster() -> Iterator[KubeCluster]:
    """Its own control plane + our kubelet on the host's Docker (KUBELET_NODE), RuntimeClass `gvisor` -> runsc.

    Raises KubeletUnavailable where the host cannot run it; on the way out the kubelet's pods are
    stopped, then every process, container, mount and log entry of the tier is removed.
    """
    from kubernetes import client

    KubeletNode.check_host()
    # Also on the pods' gateway: a stack's launcher container reaches the API there (test_kubelet_stack.py).
    plane = ControlPlane(extra_addresses=(pod_network_gateway(),))
    cluster = plane.start()
    kubelet = KubeletNode(plane)
    try:
        kubelet.start()
        wait_node_ready(plane, cluster, KUBELET_NODE, timeout=180)
        create_runtime_class(cluster)
        cluster.nodes = [KUBELET_NODE]
        yield cluster
        # Let the kubelet stop what it runs (the namespaces' deletion may still be under way).
        core = client.CoreV1Api(cluster.api_client())
        for pod in core.list_pod_for_all_namespaces().items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        with contextlib.suppress(TimeoutError):
            wait_for("the kubelet's pods gone", lambda: not core.list_pod_for_all_namespaces().items, timeout=30)
    finally:
        plane.stop_processes()
        kubelet.stop()
        plane.stop()


@contextlib.contextmanager
def fresh_namespace(cluster: KubeCluster) -> Iterator[str]:
    """A new namespace (its default service account and token ready), deleted on the way out."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    name = f"t-{secrets.token_hex(4)}"
    core.create_namespace({"metadata": {"name": name}})

    def token_ready() -> bool:
        accounts = core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
        return bool(accounts and accounts[0].secrets)

    try:
        # Pods are refused until the service-account and token controllers have filled the namespace.
        wait_for(f"namespace {name}'s default service account token", token_ready, timeout=120)
        yield name
    finally:
        core.delete_namespace(name)

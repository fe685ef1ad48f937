"""A simulated node for the test control plane: what a kubelet does to the API, without containers.

It registers a Node (Ready, with a kubelet endpoint), renews its Lease, and for every pod bound to it:
Pending -> Running -> Succeeded/Failed after `veri.test/run-seconds` (default 0.5) with the exit code
from `veri.test/exit-code` (default 0); a pod being deleted is removed (the kubelet's final delete).
It serves /containerLogs over HTTPS with the body of `veri.test/log`, so `read_namespaced_pod_log`
works through the apiserver. Run: python -m tests.kubernetes.nodesim --kubeconfig K --node N --cert C --key K
"""

from __future__ import annotations

import argparse
import datetime as dt
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

EXIT_CODE = "veri.test/exit-code"
RUN_SECONDS = "veri.test/run-seconds"
LOG = "veri.test/log"
LEASE_SECONDS = 40


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeSimulator:
    def __init__(self, api: client.ApiClient, node: str) -> None:
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.node = node
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> metadata we act on
        self.started: set[str] = set()  # pod uids being run
        self.lock = threading.Lock()

    # -- the node -------------------------------------------------------------------------------------------

    def register(self, port: int) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": {
            "kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "veri.test/simulated": "true"}}}
        try:
            self.core.create_node(body)
        except ApiException as err:
            if err.status != 409:
                raise
        self.core.patch_node_status(self.node, {"status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "500", "ephemeral-storage": "500Gi"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "500", "ephemeral-storage": "500Gi"},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {"kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "simulated://1",
                         "kernelVersion": "", "osImage": "veri node simulator", "machineID": "", "systemUUID": "",
                         "bootID": ""},
            "conditions": self._conditions(),
        }})

    def _conditions(self) -> list[dict[str, str]]:
        t = now()
        ok = [(kind, "False", f"No{kind}") for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")]
        return [{"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": t, "lastTransitionTime": t}
                for kind, status, reason in [*ok, ("Ready", "True", "KubeletReady")]]

    def heartbeat_forever(self) -> None:
        """Renew the node Lease (what the node lifecycle controller watches) and the Ready condition."""
        lease = {"metadata": {"name": self.node, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.node, "leaseDurationSeconds": LEASE_SECONDS}}
        beats = 0
        while True:
            lease["spec"]["renewTime"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            try:
                try:
                    self.coordination.patch_namespaced_lease(self.node, "kube-node-lease", lease)
                except ApiException as err:
                    if err.status != 404:
                        raise
                    self.coordination.create_namespaced_lease("kube-node-lease", lease)
                if beats % 4 == 0:
                    self.core.patch_node_status(self.node, {"status": {"conditions": self._conditions()}})
            except ApiException as err:
                print(f"heartbeat failed: {err.status} {err.reason}", flush=True)
            beats += 1
            time.sleep(10)

    # -- pods -----------------------------------------------------------------------------------------------

    def watch_pods_forever(self) -> None:
        selector = f"spec.nodeName={self.node}"
        while True:
            listing = self.core.list_pod_for_all_namespaces(field_selector=selector)
            for pod in listing.items:
                self.on_pod(pod)
            try:
                for event in watch.Watch().stream(self.core.list_pod_for_all_namespaces, field_selector=selector,
                                                  resource_version=listing.metadata.resource_version,
                                                  timeout_seconds=300):
                    if event["type"] == "DELETED":
                        pod = event["object"]
                        with self.lock:
                            self.pods.pop((pod.metadata.namespace, pod.metadata.name), None)
                    else:
                        self.on_pod(event["object"])
            except ApiException as err:
                if err.status != 410:  # 410: resourceVersion too old -> list again
                    raise

    def on_pod(self, pod: client.V1Pod) -> None:
        meta = pod.metadata
        with self.lock:
            self.pods[(meta.namespace, meta.name)] = {"annotations": meta.annotations or {}, "uid": meta.uid}
        if meta.deletion_timestamp is not None:
            # The kubelet has stopped the containers: the final delete, guarded by the uid.
            threading.Thread(target=self._remove, args=(meta.namespace, meta.name, meta.uid), daemon=True).start()
            return
        if pod.status.phase in ("Succeeded", "Failed") or meta.uid in self.started:
            return
        self.started.add(meta.uid)
        threading.Thread(target=self._run, args=(pod,), daemon=True).start()

    def _remove(self, namespace: str, name: str, uid: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0,
                                            body=client.V1DeleteOptions(grace_period_seconds=0,
                                                                        preconditions=client.V1Preconditions(uid=uid)))
        except ApiException as err:
            if err.status not in (404, 409):
                print(f"delete {namespace}/{name}: {err.status} {err.reason}", flush=True)

    def _run(self, pod: client.V1Pod) -> None:
        meta = pod.metadata
        annotations = meta.annotations or {}
        try:
            exit_code = int(annotations.get(EXIT_CODE, "0"))
            seconds = float(annotations.get(RUN_SECONDS, "0.5"))
        except ValueError:
            exit_code, seconds = 2, 0.0
        started = now()
        containers = [c.name for c in pod.spec.containers]
        self._status(pod, "Running", [
            {"name": c, "ready": True, "restartCount": 0, "image": _image(pod, c), "imageID": "",
             "containerID": f"sim://{meta.uid}/{c}", "started": True, "state": {"running": {"startedAt": started}}}
            for c in containers], ready="True", start_time=started)
        time.sleep(seconds)
        with self.lock:
            current = self.pods.get((meta.namespace, meta.name))
        if current is None or current["uid"] != meta.uid:
            return  # deleted meanwhile
        finished = now()
        reason = "Completed" if exit_code == 0 else "Error"
        self._status(pod, "Succeeded" if exit_code == 0 else "Failed", [
            {"name": c, "ready": False, "restartCount": 0, "image": _image(pod, c), "imageID": "",
             "containerID": f"sim://{meta.uid}/{c}", "started": False,
             "state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started,
                                      "finishedAt": finished, "containerID": f"sim://{meta.uid}/{c}"}}}
            for c in containers], ready="False", start_time=started)

    def _status(self, pod: client.V1Pod, phase: str, statuses: list[dict[str, Any]], ready: str,
                start_time: str) -> None:
        t = now()
        conditions = [{"type": kind, "status": status, "lastTransitionTime": t}
                      for kind, status in (("Initialized", "True"), ("Ready", ready), ("ContainersReady", ready),
                                           ("PodScheduled", "True"))]
        body = {"status": {"phase": phase, "conditions": conditions, "containerStatuses": statuses,
                           "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                           "startTime": start_time}}
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)
        except ApiException as err:
            if err.status != 404:
                print(f"status {pod.metadata.namespace}/{pod.metadata.name}: {err.status} {err.reason}", flush=True)

    def log_of(self, namespace: str, name: str) -> str | None:
        with self.lock:
            pod = self.pods.get((namespace, name))
        return None if pod is None else pod["annotations"].get(LOG, "")


def _image(pod: client.V1Pod, container: str) -> str:
    return next((c.image for c in pod.spec.containers if c.name == container), "")


def serve_logs(sim: NodeSimulator, cert: str, key: str) -> ThreadingHTTPServer:
    """The kubelet's /containerLogs/{namespace}/{pod}/{container} endpoint (what the apiserver proxies to)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            body = sim.log_of(parts[1], parts[2]) if len(parts) == 4 and parts[0] == "containerLogs" else None
            if body is None:
                self.send_error(404, "no such pod on this node")
                return
            query = parse_qs(url.query)
            if "tailLines" in query:
                lines = body.splitlines(keepends=True)
                body = "".join(lines[-int(query["tailLines"][0]):]) if int(query["tailLines"][0]) else ""
            data = body.encode()
            if "limitBytes" in query:
                data = data[: int(query["limitBytes"][0])]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--cert", required=True, help="serving certificate for the log endpoint")
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    sim = NodeSimulator(config.new_client_from_config(config_file=args.kubeconfig), args.node)
    server = serve_logs(sim, args.cert, args.key)
    sim.register(server.server_address[1])
    threading.Thread(target=sim.heartbeat_forever, daemon=True).start()
    print(f"node {args.node} registered, logs on :{server.server_address[1]}", flush=True)
    sim.watch_pods_forever()


if __name__ == "__main__":
    main()

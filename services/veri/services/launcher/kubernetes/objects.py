"""The Kubernetes objects of one rollout (a Secret and a Job) and of a launcher's namespace (its
NetworkPolicies), as plain dicts the client sends as they are. Pure functions: no API calls here.

Why a Job and not a bare Pod: the Job controller enforces `activeDeadlineSeconds` from the control
plane (a bare pod's deadline is the kubelet's, and a lost node keeps it), `backoffLimit: 0` says "run
once", and a Job is the owner the pod and the rollout's Secret hang from, so one foreground delete
removes all three. The cost is one controller hop before the pod exists (bench/k8s_launch.py).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from veri.core import envs
from veri.core.harness import BUNDLE_MOUNT, HARNESS_UID, OUTPUT_MOUNT
from veri.core.launch import RolloutLaunch
from veri.core.registry import registry_image

HARNESS_HOME = "/home/harness"  # its HOME in veri/base: a writable emptyDir under the read-only root
CONTAINER = "harness"
LABEL_SANDBOX = "veri.sandbox"
LABEL_LAUNCHER = "veri.launcher"
LABEL_EGRESS = "veri.egress"
LABEL_WEB_SITE = "veri.web"  # a pod in the namespace that rollouts with web egress may reach (webfixture)
ANNOTATION_ROLLOUT = "veri.rollout_id"  # rollout ids are free text: an annotation, not a label
# The harness contract's credentials: only ever in the rollout's Secret, never in the pod spec.
SECRET_ENV = (envs.OPENAI_API_KEY, envs.ANTHROPIC_API_KEY, envs.ANTHROPIC_AUTH_TOKEN)
Egress = Literal["web", "none"]
# A Harbor task's pod while its verifier runs (its label changed from its egress): no egress at all.
OFFLINE = "offline"
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10")


@dataclass(frozen=True)
class OutputVolume:
    """Where VERI_OUTPUT_DIR lives: one volume the launcher has mounted at `output_root` and each rollout
    pod mounts with subPath = its folder under it. `claim`: a PersistentVolumeClaim (ReadWriteMany
    across nodes); otherwise `host_path` on the node (one node, or the launcher on every node's path)."""

    claim: str | None = None
    host_path: str | None = None

    def volume(self) -> dict[str, Any]:
        if self.claim:
            return {"name": "output", "persistentVolumeClaim": {"claimName": self.claim}}
        return {"name": "output", "hostPath": {"path": self.host_path, "type": "Directory"}}


@dataclass(frozen=True)
class PodSettings:
    """What every rollout pod of one launcher shares."""

    namespace: str
    launcher_id: str
    runtime_class: str = "gvisor"
    registry: str | None = None  # image prefix of a private registry (veri harness push --registry)
    service_account: str | None = None  # a service account without API rights; the token is never mounted
    node_selector: dict[str, str] | None = None
    # Names the cluster's DNS does not serve, pinned in each pod's /etc/hosts (hostAliases): the proxy
    # and web fixture of a compose stack outside the cluster (compose.kubernetes.yaml), name -> IP.
    host_aliases: dict[str, str] | None = None


def object_name(rollout_id: str) -> str:
    """A DNS-1123 name (Job, its pods' `job-name` label, the Secret) from a free-text rollout id: a
    readable prefix plus a hash of the whole id, so two ids never share a name."""
    readable = re.sub(r"[^a-z0-9-]+", "-", rollout_id.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(rollout_id.encode()).hexdigest()[:10]
    return f"veri-{readable}-{digest}" if readable else f"veri-{digest}"


def label_value(text: str) -> str:
    """A valid label value (<= 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return value or "default"


def launcher_selector(launcher_id: str) -> str:
    return f"{LABEL_SANDBOX}=1,{LABEL_LAUNCHER}={label_value(launcher_id)}"


def rollout_labels(pod: PodSettings, egress: Egress) -> dict[str, str]:
    return {LABEL_SANDBOX: "1", LABEL_LAUNCHER: label_value(pod.launcher_id), LABEL_EGRESS: egress}


def rollout_annotations(launch: RolloutLaunch) -> dict[str, str]:
    """The launch's labels (job, task_index, ...) as `veri.<key>` annotations, like the docker backend's
    container labels, plus the rollout id."""
    notes = {f"veri.{key}": str(value) for key, value in launch.labels.items()}
    notes[ANNOTATION_ROLLOUT] = launch.rollout_id
    return notes


def secret_manifest(launch: RolloutLaunch, name: str, pod: PodSettings, egress: Egress) -> dict[str, Any]:
    """The rollout's credentials. Created before its Job, then owned by it (`owner_reference`)."""
    data = {key: launch.env[key] for key in SECRET_ENV if key in launch.env}
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": pod.namespace, "labels": rollout_labels(pod, egress),
                     "annotations": {ANNOTATION_ROLLOUT: launch.rollout_id}},
        "stringData": data,
    }


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    """Makes the Job the owner of another object: deleting the Job (foreground) deletes it first."""
    meta = job["metadata"]
    return {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
            "controller": False, "blockOwnerDeletion": True}


def harness_env(launch: RolloutLaunch, secret: str) -> list[dict[str, Any]]:
    """Exactly the harness contract's variables; the credentials by reference to the Secret."""
    env: list[dict[str, Any]] = []
    for key, value in {**launch.env, envs.VERI_OUTPUT_DIR: OUTPUT_MOUNT}.items():
        if key in SECRET_ENV:
            env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
        else:
            env.append({"name": key, "value": value})
    return env


def job_manifest(launch: RolloutLaunch, name: str, pod: PodSettings, output: OutputVolume,
                 output_subpath: str, egress: Egress) -> dict[str, Any]:
    limits = launch.limits
    scratch = f"{limits.tmpfs_mb}Mi"
    container = {
        "name": CONTAINER,
        "image": registry_image(launch.image, pod.registry),  # what `veri harness push` tags
        "imagePullPolicy": "IfNotPresent",  # tags are content hashes: a tag never changes meaning
        "workingDir": BUNDLE_MOUNT,
        "env": harness_env(launch, name),
        "resources": {  # requests = limits: the Guaranteed class, nothing overcommitted
            "limits": {"cpu": cpu(limits.cpus), "memory": f"{limits.memory_mb}Mi"},
            "requests": {"cpu": cpu(limits.cpus), "memory": f"{limits.memory_mb}Mi"},
        },
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": HARNESS_UID, "runAsGroup": HARNESS_UID,
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "work", "mountPath": "/work"},
            {"name": "home", "mountPath": HARNESS_HOME},
            {"name": "output", "mountPath": OUTPUT_MOUNT, "subPath": output_subpath},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    spec: dict[str, Any] = {
        **pod_basics(pod),
        "securityContext": {"runAsNonRoot": True, "runAsUser": HARNESS_UID, "runAsGroup": HARNESS_UID,
                            "fsGroup": HARNESS_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [
            {"name": "tmp", "emptyDir": {"sizeLimit": scratch}},
            {"name": "work", "emptyDir": {"sizeLimit": scratch}},
            {"name": "home", "emptyDir": {"sizeLimit": scratch}},
            output.volume(),
        ],
    }
    return job_around(launch, name, pod, egress, spec, max(1, math.ceil(launch.timeout_s)))


def pod_basics(pod: PodSettings) -> dict[str, Any]:
    """The pod spec's fields every rollout pod shares: run once, gVisor, no API token, no Service variables."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "runtimeClassName": pod.runtime_class,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # no Service variables: the environment is the contract's
        "terminationGracePeriodSeconds": 1,  # a killed rollout is over: nothing to wait for
    }
    if pod.service_account:
        spec["serviceAccountName"] = pod.service_account
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.host_aliases:
        spec["hostAliases"] = host_aliases(pod.host_aliases)
    return spec


def job_around(launch: RolloutLaunch, name: str, pod: PodSettings, egress: Egress, spec: dict[str, Any],
               deadline_s: int) -> dict[str, Any]:
    """The rollout's Job around its pod spec: run once, killed by the control plane past `deadline_s`."""
    labels = rollout_labels(pod, egress)
    annotations = rollout_annotations(launch)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": pod.namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,  # a rollout runs once: a failure is its result, not a retry
            "completions": 1, "parallelism": 1,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
        },
    }


def host_aliases(aliases: dict[str, str]) -> list[dict[str, Any]]:
    """{name: ip} as the pod spec's hostAliases, one entry per address."""
    by_ip: dict[str, list[str]] = {}
    for name, ip in aliases.items():
        by_ip.setdefault(ip, []).append(name)
    return [{"ip": ip, "hostnames": sorted(names)} for ip, names in sorted(by_ip.items())]


def network_policies(namespace: str, launcher_id: str, proxy_selector: dict[str, str], proxy_port: int,
                     proxy_namespace: str | None = None, outside_hosts: tuple[str, ...] = ()
                     ) -> list[dict[str, Any]]:
    """One policy per egress mode over this launcher's rollout pods. Every rollout pod is isolated both
    ways: no ingress at all; egress to the proxy's rollout port and DNS, and for `web` to public
    addresses (not the cluster's or other private ranges) and pods labelled `veri.web: "1"`. Policies
    add up, so each pod is selected by exactly one (its `veri.egress` label). Only a CNI that enforces
    NetworkPolicy makes these real. A third, `offline`, allows nothing: a Harbor task's pod is moved to it
    before its verifier runs (kubernetes/task_run.py).

    `outside_hosts`: the addresses of the host aliases (a stack outside the cluster): every pod may
    reach them on the proxy's port, `web` pods on any port (the stack's web fixture)."""
    proxy_peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(proxy_selector)}}
    if proxy_namespace and proxy_namespace != namespace:
        proxy_peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": proxy_namespace}}
    outside = [{"ipBlock": {"cidr": f"{ip}/32"}} for ip in sorted(set(outside_hosts))]
    to_proxy = {"to": [proxy_peer, *outside], "ports": [{"protocol": "TCP", "port": proxy_port}]}
    dns = {"to": [{"namespaceSelector": {},
                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    web = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}],
           "ports": [{"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 443}]}
    # In-cluster sites that stand for the web (the demo's webfixture) carry this label.
    web_sites = {"to": [{"podSelector": {"matchLabels": {LABEL_WEB_SITE: "1"}}}, *outside]}
    rules: dict[str, list[dict[str, Any]]] = {"none": [to_proxy, dns], "web": [to_proxy, dns, web, web_sites],
                                              OFFLINE: []}
    launcher = label_value(launcher_id)
    return [
        {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"veri-rollouts-{launcher}-egress-{mode}"[:253].lower().replace("_", "-"),
                         "namespace": namespace,
                         "labels": {LABEL_LAUNCHER: launcher, "app.kubernetes.io/part-of": "veri"}},
            "spec": {
                "podSelector": {"matchLabels": {LABEL_SANDBOX: "1", LABEL_LAUNCHER: launcher,
                                                LABEL_EGRESS: mode}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": egress,
            },
        }
        for mode, egress in rules.items()
    ]


def cpu(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"

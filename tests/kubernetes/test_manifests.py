"""deploy/kubernetes: each overlay rendered by kubectl's own kustomize and accepted by the real
apiserver (`kubectl apply --dry-run=server`: admission and validation run, nothing is stored)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.kubernetes_cluster import KubeCluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "gpu")


def render(cluster: KubeCluster, overlay: str) -> list[dict]:
    done = subprocess.run([*cluster.kubectl, "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def into_namespace(docs: list[dict], namespace: str) -> list[dict]:
    """The overlay's objects moved from `veri` into the test's namespace (a dry run cannot create it)."""
    for doc in docs:
        meta = doc["metadata"]
        if meta.get("namespace") == "veri":
            meta["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if subject.get("namespace") == "veri":
                subject["namespace"] = namespace
    return docs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_applies_on_the_apiserver(k8s_cluster: KubeCluster, k8s_namespace: str, overlay: str) -> None:
    docs = into_namespace(render(k8s_cluster, overlay), k8s_namespace)
    done = subprocess.run([*k8s_cluster.kubectl, "apply", "--dry-run=server", "-f", "-"],
                          input=yaml.safe_dump_all(docs), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in docs}
    for kind, name in kinds:
        assert f"{name} " in done.stdout or f"/{name} " in done.stdout, (kind, name, done.stdout)
    assert done.stdout.count("(server dry run)") == len(docs)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_content(k8s_cluster: KubeCluster, overlay: str) -> None:
    docs = {(doc["kind"], doc["metadata"]["name"]): doc for doc in render(k8s_cluster, overlay)}
    assert {"proxy", "launcher", "console", "policy", "webfixture"} <= {
        name for kind, name in docs if kind == "Deployment"}
    assert docs[("RuntimeClass", "gvisor")]["handler"] == "runsc"
    trainer = docs[("Job", "trainer")]["spec"]["template"]["spec"]["containers"][0]
    policy = docs[("Deployment", "policy")]["spec"]["template"]["spec"]["containers"][0]
    if overlay == "gpu":
        assert policy["args"][:2] == ["vllm", "serve"] and policy["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert trainer["resources"]["limits"]["nvidia.com/gpu"] == 1
    else:
        assert policy["args"][:3] == ["veri", "serve", "policy"] and "nvidia.com/gpu" not in str(policy)
    launcher = docs[("Deployment", "launcher")]["spec"]["template"]["spec"]
    assert launcher["serviceAccountName"] == "veri-launcher"
    assert launcher["containers"][0]["args"][:5] == ["veri", "serve", "launcher", "--backend", "kubernetes"]
    # The launcher's default proxy selector is the proxy pods' label; rollout URLs name the Service `proxy`.
    proxy = docs[("Deployment", "proxy")]["spec"]["template"]["metadata"]["labels"]
    assert proxy["app.kubernetes.io/name"] == "veri-proxy" and ("Service", "proxy") in docs

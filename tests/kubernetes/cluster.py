"""A real Kubernetes 1.20 control plane for tests: etcd + apiserver + controller-manager + scheduler.

The binaries are built from Debian's source package by scripts/k8s/build.sh into build/k8s/bin/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import kubernetes.client

REPO = Path(__file__).resolve().parents[2]
K8S_BUILD = REPO / "build" / "k8s"
K8S_BIN = K8S_BUILD / "bin"


@dataclass
class KubeCluster:
    kubeconfig: Path  # admin kubeconfig (token auth, the self-signed CA)
    server: str  # https://127.0.0.1:PORT
    kubectl: list[str]  # [kubectl 1.20, "--kubeconfig", kubeconfig]
    nodes: list[str] = field(default_factory=list)

    def api_client(self) -> kubernetes.client.ApiClient:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

"""The kubernetes backend's objects, built without a cluster: what each rollout pod may and may not do.
(test_backend.py sends them to a real apiserver.)"""

from __future__ import annotations

import asyncio
import time

import pytest

from veri.core import envs
from veri.core.harness import OUTPUT_MOUNT, rollout_env
from veri.core.launch import RolloutLaunch, SandboxLimits
from veri.services.launcher.kubernetes import objects
from veri.services.launcher.kubernetes.objects import OutputVolume, PodSettings
from veri.services.launcher.kubernetes.pacing import CreationPacer

KEY = "sk-rollout-secret-4f1c"
POD = PodSettings(namespace="rollouts", launcher_id="ci", registry="registry.local:5000")


def launch(rollout_id: str = "job-1.t0.r2", timeout_s: float = 90.5) -> RolloutLaunch:
    env = rollout_env(proxy_base_url="http://proxy:8000", rollout_id=rollout_id, api_key=KEY, model="tiny",
                      task={"prompt": "hi"}, task_index=0, rollout_index=2, max_turns=4)
    return RolloutLaunch(rollout_id=rollout_id, image="veri/harness-url:abc123", env=env, timeout_s=timeout_s,
                         limits=SandboxLimits(cpus=0.5, memory_mb=768, tmpfs_mb=64), labels={"job": "j1"})


def job(rollout: RolloutLaunch | None = None, egress: objects.Egress = "web") -> dict:
    rollout = rollout or launch()
    name = objects.object_name(rollout.rollout_id)
    return objects.job_manifest(rollout, name, POD, OutputVolume(claim="veri-rollouts"), "step-1/r2", egress)


def test_pod_is_locked_down() -> None:
    spec = job()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "768Mi"}
    assert container["image"] == "registry.local:5000/veri/harness-url:abc123"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"/tmp", "/work", objects.HARNESS_HOME, OUTPUT_MOUNT}
    assert mounts[OUTPUT_MOUNT]["subPath"] == "step-1/r2"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["output"]["persistentVolumeClaim"] == {"claimName": "veri-rollouts"}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "64Mi"}


def test_job_runs_once_under_the_harness_timeout() -> None:
    spec = job()["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 91  # ceil(90.5): never shorter than the harness timeout


def test_api_key_only_in_the_secret() -> None:
    rollout = launch()
    manifest = job(rollout)
    assert KEY not in str(manifest)
    env = {item["name"]: item for item in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}
    for key in (envs.OPENAI_API_KEY, envs.ANTHROPIC_API_KEY, envs.ANTHROPIC_AUTH_TOKEN):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": manifest["metadata"]["name"], "key": key}
    assert env[envs.VERI_OUTPUT_DIR]["value"] == OUTPUT_MOUNT
    # exactly the contract's variables, nothing else
    assert set(env) == set(rollout.env) | {envs.VERI_OUTPUT_DIR}
    secret = objects.secret_manifest(rollout, manifest["metadata"]["name"], POD, "web")
    assert secret["stringData"] == {k: KEY for k in objects.SECRET_ENV}
    assert secret["metadata"]["labels"] == manifest["metadata"]["labels"]


def test_labels_select_this_launcher_and_annotations_carry_the_rest() -> None:
    manifest = job(egress="none")
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert labels == {"veri.sandbox": "1", "veri.launcher": "ci", "veri.egress": "none"}
    assert objects.launcher_selector("ci") == "veri.sandbox=1,veri.launcher=ci"
    notes = manifest["spec"]["template"]["metadata"]["annotations"]
    assert notes == {"veri.job": "j1", "veri.rollout_id": "job-1.t0.r2"}


@pytest.mark.parametrize("rollout_id", ["job-1/t0/r2", "job-1.t0.r2", "A" * 300, "___", "Ünïcode rollout"])
def test_object_names_are_dns_labels_and_distinct(rollout_id: str) -> None:
    name = objects.object_name(rollout_id)
    assert len(name) <= 63
    assert name == name.lower() and name[0].isalnum() and name[-1].isalnum()
    assert all(c.isalnum() or c == "-" for c in name)
    assert objects.object_name(rollout_id + "x") != name


def test_network_policies_isolate_each_egress_mode() -> None:
    policies = {p["spec"]["podSelector"]["matchLabels"]["veri.egress"]: p
                for p in objects.network_policies("rollouts", "ci", {"app": "proxy"}, 8000)}
    assert set(policies) == {"web", "none", "offline"}
    offline = policies.pop("offline")  # a Harbor task's pod while its verifier runs: nothing out, nothing in
    assert offline["spec"]["egress"] == [] and offline["spec"]["ingress"] == []
    assert offline["spec"]["policyTypes"] == ["Ingress", "Egress"]
    for policy in policies.values():
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert policy["spec"]["ingress"] == []
        to_proxy = policy["spec"]["egress"][0]
        assert to_proxy == {"to": [{"podSelector": {"matchLabels": {"app": "proxy"}}}],
                            "ports": [{"protocol": "TCP", "port": 8000}]}
    none_rules = policies["none"]["spec"]["egress"]
    assert not any("ipBlock" in peer for rule in none_rules for peer in rule["to"])
    (web,) = [rule for rule in policies["web"]["spec"]["egress"] if "ipBlock" in rule["to"][0]]
    assert {"to": [{"podSelector": {"matchLabels": {"veri.web": "1"}}}]} in policies["web"]["spec"]["egress"]
    assert "10.0.0.0/8" in web["to"][0]["ipBlock"]["except"]  # the cluster's own addresses stay out


def test_pacer_spaces_creation_after_the_burst() -> None:
    async def create(n: int, per_second: float) -> float:
        pacer = CreationPacer(per_second=per_second, burst=5)
        started = time.monotonic()
        await asyncio.gather(*(pacer.wait() for _ in range(n)))
        return time.monotonic() - started

    # The burst: no wait. At 0.01/s one wait would take 100 s; 30 s holds for a loaded box's event loop.
    assert asyncio.run(create(5, per_second=0.01)) < 30
    assert asyncio.run(create(15, per_second=50)) >= 10 / 50 * 0.9  # 10 past the burst at 50/s
    with pytest.raises(ValueError, match="creation rate"):
        CreationPacer(per_second=0, burst=1)


def test_host_aliases_pin_a_stack_outside_the_cluster() -> None:
    """compose.kubernetes.yaml: the pods reach the stack's proxy and web fixture by name at one address."""
    pod = PodSettings(namespace="rollouts", launcher_id="ci",
                      host_aliases={"proxy": "172.17.0.1", "webfixture": "172.17.0.1", "db": "10.1.2.3"})
    manifest = objects.job_manifest(launch(), "r", pod, OutputVolume(host_path="/srv/state/outputs"), "s/r", "web")
    spec = manifest["spec"]["template"]["spec"]
    assert spec["hostAliases"] == [{"ip": "10.1.2.3", "hostnames": ["db"]},
                                   {"ip": "172.17.0.1", "hostnames": ["proxy", "webfixture"]}]
    assert {"name": "output", "hostPath": {"path": "/srv/state/outputs", "type": "Directory"}} in spec["volumes"]
    assert "hostAliases" not in job()["spec"]["template"]["spec"]  # none unless asked for

    policies = {p["spec"]["podSelector"]["matchLabels"]["veri.egress"]: p["spec"]["egress"]
                for p in objects.network_policies("rollouts", "ci", {"app": "proxy"}, 18000, None,
                                                  ("172.17.0.1", "172.17.0.1"))}
    outside = {"ipBlock": {"cidr": "172.17.0.1/32"}}
    assert policies.pop("offline") == []
    for egress in policies.values():  # the proxy's port at that address, whatever the egress
        assert egress[0] == {"to": [{"podSelector": {"matchLabels": {"app": "proxy"}}}, outside],
                             "ports": [{"protocol": "TCP", "port": 18000}]}
    # any port there (the web fixture) only for web egress: a private address the web rule leaves out
    assert {"to": [{"podSelector": {"matchLabels": {"veri.web": "1"}}}, outside]} in policies["web"]
    assert not any(outside in rule["to"] and "ports" not in rule for rule in policies["none"])

"""A Harbor task's rollout pod on the kubernetes backend, built without a cluster (task_objects.py), and how
each exec is wrapped (pod_exec.exec_command). test_task_kubelet.py runs them on a real kubelet."""

from __future__ import annotations

from veri.core import envs
from veri.core.harness import OUTPUT_MOUNT
from veri.core.launch import RolloutLaunch, SandboxLimits, TaskEnvironment
from veri.services.launcher.kubernetes import task_objects
from veri.services.launcher.kubernetes.objects import OutputVolume, PodSettings
from veri.services.launcher.kubernetes.pod_exec import PodEnv, exec_command

KEY = "sk-task-secret-91ab"
POD = PodSettings(namespace="rollouts", launcher_id="ci")


def launch(**task: object) -> RolloutLaunch:
    environment = TaskEnvironment(**{"image": "veri/task-hello:abc", "tests_dir": "/srv/tasks/hello/tests",
                                     "agent": "nop", **task})
    return RolloutLaunch(rollout_id="j.t0.r1", image="veri/harness-x:1", timeout_s=60,
                         env={envs.OPENAI_API_KEY: KEY, "VERI_ROLLOUT_ID": "j.t0.r1"},
                         limits=SandboxLimits(cpus=0.5, memory_mb=768), task_env=environment)


def pod_of(rollout: RolloutLaunch) -> tuple[dict, dict]:
    job = task_objects.task_job_manifest(rollout, "veri-r1", POD, OutputVolume(host_path="/srv/out"), "s/r1", "none",
                                         deadline_s=300.5)
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return job, container


def test_the_task_pod_runs_the_tasks_image_limits_and_workdir() -> None:
    job, container = pod_of(launch(cpus=2, memory_mb=1024, storage_mb=500, workdir="/app", env={"TASK_VAR": "t"}))
    spec = job["spec"]["template"]["spec"]
    assert container["image"] == "veri/task-hello:abc" and container["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in container and container["args"] == ["sh", "-c", "sleep infinity"]  # ENTRYPOINT kept
    assert container["workingDir"] == "/app"
    assert container["resources"]["limits"] == {"cpu": "2000m", "memory": "1024Mi", "ephemeral-storage": "500Mi"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert spec["runtimeClassName"] == "gvisor" and spec["automountServiceAccountToken"] is False
    assert job["spec"]["activeDeadlineSeconds"] == 301 and job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["labels"]["veri.egress"] == "none"


def test_the_pod_keeps_only_what_the_verifier_needs_and_no_escalation() -> None:
    _, container = pod_of(launch())
    security = container["securityContext"]
    assert security["runAsUser"] == 0 and security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"]["add"]) == {
        "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE",
        "SYS_CHROOT", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_ADMIN"}  # Docker's default set + mounts


def test_the_mount_points_of_the_docker_sandbox_and_read_only_trees() -> None:
    job, container = pod_of(launch(runtime_tree="/srv/build/tasks/runtime/abc", tools_dir="/srv/build/tasks/tools"))
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for read_only in ("/tests", "/logs/verifier", "/veri/verify", "/veri/rt", "/veri/tools"):
        assert mounts[read_only].get("readOnly") is True, read_only
    assert not mounts["/logs"].get("readOnly") and mounts[OUTPUT_MOUNT]["subPath"] == "s/r1"
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/tests"]["name"]]["emptyDir"]["medium"] == "Memory"  # empty until the verifier's own
    assert volumes["runtime"]["hostPath"] == {"path": "/srv/build/tasks/runtime/abc", "type": "Directory"}
    assert volumes["tools"]["hostPath"] == {"path": "/srv/build/tasks/tools", "type": "Directory"}
    assert "/srv/tasks/hello/tests" not in str(job)  # the tests reach the pod only on the verifier's stdin


def test_the_key_is_only_in_the_secret_and_the_task_env_comes_first() -> None:
    job, container = pod_of(launch(env={"TASK_VAR": "t", "VERI_ROLLOUT_ID": "task's"}))
    assert KEY not in str(job)
    env = [item["name"] for item in container["env"]]
    assert env[0] == "TASK_VAR" and env.count("VERI_ROLLOUT_ID") == 1  # the contract wins a name both have
    by_name = {item["name"]: item for item in container["env"]}
    assert by_name[envs.OPENAI_API_KEY]["valueFrom"]["secretKeyRef"] == {"name": "veri-r1", "key": envs.OPENAI_API_KEY}


def test_task_egress_is_the_stricter() -> None:
    assert task_objects.task_egress("web", launch().task_env) == "web"
    assert task_objects.task_egress("none", launch().task_env) == "none"
    assert task_objects.task_egress("web", launch(network_mode="no-network").task_env) == "none"
    assert task_objects.task_egress("web", launch(network_mode="allowlist", allowed_hosts=["pypi.org"]).task_env) \
        == "none"  # NetworkPolicy has addresses, not names: as a bundle's allowlist


POD_ENV = PodEnv(container={"TASK_VAR": "t", envs.OPENAI_API_KEY: KEY, "VERI_ROLLOUT_ID": "r"}, base={"TASK_VAR": "t"})


def test_an_exec_never_carries_the_key_and_the_verifier_loses_the_contract() -> None:
    agent = exec_command(["sh", "-c", "x"], env={envs.OPENAI_API_KEY: KEY, "VERI_ROLLOUT_ID": "r", "PATH": "/p"},
                         pod_env=POD_ENV)
    assert agent == ["env", "PATH=/p", "sh", "-c", "x"]  # the contract is the container's already
    verifier = exec_command(["unshare", "-m"], env={"PATH": "/v", "UV_OFFLINE": "1"}, pod_env=POD_ENV,
                            stdin_bytes=10240)
    assert verifier == ["sh", "-c", 'head -c "$0" | "$@"', "10240", "env", f"--unset={envs.OPENAI_API_KEY}",
                        "--unset=VERI_ROLLOUT_ID", "PATH=/v", "UV_OFFLINE=1", "unshare", "-m"]
    assert KEY not in str(verifier)


def test_an_unprivileged_exec_drops_every_capability_in_its_workdir() -> None:
    check = exec_command(["sh", "-c", "test -e /ready"], env={}, pod_env=PodEnv(), privileged=False, workdir="/app")
    assert check == ["sh", "-c", 'cd "$0" && exec "$@"', "/app", "setpriv", "--bounding-set=-all", "--inh-caps=-all",
                     "sh", "-c", "test -e /ready"]


def test_the_image_config_recorded_at_the_jobs_start_needs_no_docker_or_registry(monkeypatch) -> None:
    """The stack's launcher container on Kubernetes has neither: the launch's image_config (read where `veri
    tasks build` made the image) is what the agent's and the verifier's execs run with."""
    from veri.core.launch import TaskImageConfig
    from veri.services.launcher.kubernetes import task_image

    def no_docker(image: str) -> dict:
        raise AssertionError(f"read {image} from Docker although the launch carries its config")

    monkeypatch.setattr(task_image, "_docker_config", no_docker)
    config = TaskImageConfig.of({"WorkingDir": "/app", "User": "1000:1000", "Env": ["PATH=/opt/bin:/usr/bin", "X"]})
    assert config == TaskImageConfig(workdir="/app", user="1000", path="/opt/bin:/usr/bin")
    images = task_image.TaskImages(registry=None)
    environment = launch(image_config=config).task_env
    assert images.of(environment) == task_image.TaskImage(workdir="/app", path="/opt/bin:/usr/bin", user="1000")
    # the task's own workdir wins over the image's, as on the docker backend
    assert images.of(launch(image_config=config, workdir="/srv").task_env).workdir == "/srv"

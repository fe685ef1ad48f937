"""The images `make images` builds, run the way the launcher runs them: real dockerd, runtime runsc
(gVisor), the non-root `harness` user, resource limits."""

from __future__ import annotations

import hashlib
import json
import textwrap
import uuid

from tests.sandbox.conftest import (
    BASE,
    CLAUDE_AGENT,
    CODEX_AGENT,
    LABEL,
    ROOT,
    RUNTIME,
    claude_code_version,
    docker,
    makefile_version,
)
from tests.waiting import wait_for


def py(code: str) -> list[str]:
    return ["python3", "-c", textwrap.dedent(code)]


def test_base_runs_python_as_harness_under_gvisor(run_sandboxed):
    result = run_sandboxed(BASE, py("""
        import json, os, pwd, subprocess
        import anthropic, httpx, openai, requests
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
        print(json.dumps({"uid": os.getuid(), "user": pwd.getpwuid(os.getuid()).pw_name,
                          "cwd": os.getcwd(), "gvisor": "gVisor" in kernel,
                          "openai": openai.__version__, "anthropic": anthropic.__version__}))
    """))
    assert result.exit_code == 0, result.output
    info = json.loads(result.output.strip().splitlines()[-1])
    assert (info["uid"], info["user"], info["cwd"]) == (1000, "harness", "/work")
    assert info["gvisor"], "the container did not run under gVisor"
    assert info["openai"] and info["anthropic"]


def test_coreutils_work_under_gvisor(run_sandboxed):
    """gVisor before 20240729 fails statx(AT_NO_AUTOMOUNT): `ls`, `stat` and `cp -a` break in every
    sandbox. `make docker` insists on a newer runsc; this keeps it honest."""
    result = run_sandboxed(BASE, ["bash", "-ec", "ls /work /tmp /etc >/dev/null; stat -c %s /etc/passwd; "
                                  "cp -a /etc/passwd /tmp/p; ls -la /tmp; echo done"])
    assert result.exit_code == 0 and "done" in result.output, result.output


def test_read_only_root_with_tmpfs(run_sandboxed):
    result = run_sandboxed(
        BASE, ["bash", "-c", "touch /work/x /tmp/y && echo writable; touch /etc/z 2>/dev/null || echo read-only"],
        read_only=True, tmpfs={"/tmp": "", "/work": "uid=1000,gid=1000"},
    )
    assert result.exit_code == 0, result.output
    assert "writable" in result.output and "read-only" in result.output


def test_claude_code_pinned_in_claude_agent_image(run_sandboxed):
    version = claude_code_version()
    result = run_sandboxed(CLAUDE_AGENT, ["claude", "--version"])
    assert result.exit_code == 0, result.output
    assert result.output.split()[0] == version, result.output

    # The SDK runs that same binary (its wheel bundles one of its own; the image points it here).
    result = run_sandboxed(CLAUDE_AGENT, py("""
        import os, shutil, claude_agent_sdk
        from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
        cli = SubprocessCLITransport.__new__(SubprocessCLITransport)._find_cli()
        print(os.path.realpath(cli) == os.path.realpath(shutil.which("claude")))
        print(os.environ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], os.environ["DISABLE_AUTOUPDATER"])
        print(os.access(os.environ["HOME"], os.W_OK))
    """))
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["True", "1", "1", "True"], result.output


def test_codex_cli_pinned_in_codex_agent_image(run_sandboxed):
    """The native binary runs under gVisor as the harness user, with the launcher's read-only root
    and tmpfs HOME (where Codex keeps its state), and the ripgrep it searches with."""
    result = run_sandboxed(
        CODEX_AGENT, ["sh", "-ec", 'codex --version; rg --version | head -1; touch "$HOME/x"; echo "$HOME"'],
        read_only=True, tmpfs={"/tmp": "", "/home/harness": "uid=1000,gid=1000"},
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == f"codex-cli {makefile_version('CODEX_VERSION')}", result.output
    assert lines[1].startswith("ripgrep ") and lines[2] == "/home/harness", result.output


def test_ulimit_nproc_stops_a_fork_bomb_gracefully(docker_client, run_sandboxed):
    """With --ulimit nproc (enforced by gVisor inside the sandbox, for a non-root user) a fork bomb
    gets EAGAIN instead of taking the sandbox down; the container still works and exits on its
    own; dockerd and a neighbouring sandbox are unaffected. --pids-limit (which counts the sandbox's
    own host threads too) stays a generous backstop."""
    neighbour = docker_client.containers.run(
        BASE, py("""
            import time
            while True:
                print("tick", flush=True); time.sleep(0.2)
        """), detach=True, runtime="runsc", user="harness", network_mode="none",
        labels={LABEL: "1"}, name=f"veri-test-{uuid.uuid4().hex[:10]}",
    )
    limits = dict(ulimits=[docker.types.Ulimit(name="nproc", soft=64, hard=64)], pids_limit=4096)
    try:
        # 1. A program that forks until refused, then cleans up and carries on.
        result = run_sandboxed(BASE, py("""
            import os, subprocess, time
            kids = []
            try:
                while True:
                    pid = os.fork()
                    if pid == 0:
                        time.sleep(60); os._exit(0)
                    kids.append(pid)
            except OSError as exc:
                print("refused after", len(kids), exc.errno, flush=True)
            for pid in kids:
                os.kill(pid, 9); os.waitpid(pid, 0)
            print(subprocess.run(["echo", "still works"], capture_output=True, text=True).stdout, end="")
        """), **limits)
        assert result.exit_code == 0, result.output
        refused = result.output.split()
        assert refused[:2] == ["refused", "after"] and int(refused[2]) < 64 and refused[3] == "11", result.output
        assert "still works" in result.output

        # 2. A real shell fork bomb; PID 1 outlives it and the container exits by itself.
        result = run_sandboxed(BASE, py("""
            import subprocess, time
            subprocess.Popen(["bash", "-c", ":(){ :|:& };:"])
            time.sleep(5)
            print("pid 1 survived", flush=True)
        """), timeout=90, **limits)
        assert result.exit_code == 0 and "pid 1 survived" in result.output, result.output

        assert docker_client.ping()
        ticks = neighbour.logs().count(b"tick")
        wait_for(lambda: neighbour.logs().count(b"tick") > ticks, "the neighbour to tick again", timeout_s=30)
        neighbour.reload()
        assert neighbour.status == "running"
    finally:
        neighbour.remove(force=True)


def test_memory_limit_stops_a_memory_hog(docker_client, run_sandboxed):
    """--memory holds under gVisor. How the hog ends varies (measured on runsc 20240729): mostly the
    host OOM killer kills the sandbox (exit 137, State.OOMKilled usually but not always true),
    sometimes the sentry refuses the allocation (MemoryError, exit 1; at times with no memory left to
    print it, so the output just stops after the last allocation). Never does it finish."""
    result = run_sandboxed(BASE, py("""
        hog = []
        for i in range(40):
            hog.append(b"x" * (50 << 20))
            print(f"{(i + 1) * 50} MB", flush=True)
        print("not killed")
    """), mem_limit="256m", memswap_limit="256m")
    assert "not killed" not in result.output
    last_line = (result.output.strip().splitlines() or [""])[-1]
    stopped_while_allocating = result.exit_code == 1 and last_line.endswith(" MB")
    assert result.exit_code == 137 or result.oom_killed or "MemoryError" in result.output or stopped_while_allocating, \
        result
    assert "300 MB" not in result.output, result.output
    assert docker_client.ping()


def test_sandbox_cannot_reach_the_docker_socket(docker_client, run_sandboxed):
    probe = py("""
        import os, socket
        found = [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)]
        env = sorted(k for k in os.environ if k.startswith("DOCKER"))
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect("/var/run/docker.sock")
            s.sendall(b"GET /version HTTP/1.0\\r\\n\\r\\n")
            reached = bool(s.recv(64))
        except OSError:
            reached = False
        print(found, env, reached)
    """)
    result = run_sandboxed(BASE, probe)
    assert result.exit_code == 0 and result.output.split() == ["[]", "[]", "False"], result.output

    # Even a launcher bug that bind-mounts the socket does not hand it over: runsc refuses host
    # unix sockets (older runsc: refuses to start such a container at all).
    try:
        socket = {"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}}
        result = run_sandboxed(BASE, probe, volumes=socket)
    except docker.errors.APIError:
        return
    assert result.output.split()[-1] == "False", result.output


def test_runtime_image_has_veri_and_cpu_torch(run_sandboxed):
    result = run_sandboxed(RUNTIME, py("""
        import torch, veri.cli
        print(torch.__version__)
    """), user="root", timeout=180)
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("+cpu"), result.output


def test_veris_images_carry_its_licence(run_sandboxed):
    """veri/base holds veri's own script (veri-add-extra-ca), veri/runtime veri itself: each carries veri's LICENSE
    (Apache-2.0) in /usr/share/doc/veri/, and so does every image FROM veri/base; the runtime also the page that
    says what each image carries (docs/licences.md), and the LICENSE in veri's package metadata."""
    licence = hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest()
    for image in (BASE, CLAUDE_AGENT, CODEX_AGENT, RUNTIME):
        result = run_sandboxed(image, ["sha256sum", "/usr/share/doc/veri/LICENSE"],
                               user="root" if image == RUNTIME else "harness")  # the runtime has no harness user
        assert result.exit_code == 0 and result.output.split()[0] == licence, (image, result.output)
    result = run_sandboxed(RUNTIME, ["bash", "-c", "head -1 /usr/share/doc/veri/licences.md; pip show -f veri"],
                           user="root", timeout=180)
    assert result.exit_code == 0 and result.output.startswith("# Licences"), result.output
    assert "dist-info/licenses/LICENSE" in result.output, result.output
    # Claude Code's own terms travel with it (its package's LICENSE.md), as docs/licences.md says.
    terms = run_sandboxed(CLAUDE_AGENT, ["cat", "/usr/local/lib/node_modules/@anthropic-ai/claude-code/LICENSE.md"])
    assert terms.exit_code == 0 and "https://code.claude.com/docs/en/legal-and-compliance" in terms.output

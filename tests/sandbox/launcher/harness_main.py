"""One test harness, many behaviours: VERI_TASK's "fault" picks one (the env is exactly the contract,
so the task row is the only way to tell a rollout what to do)."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

task = json.loads(os.environ.get("VERI_TASK") or "{}")
out = pathlib.Path(os.environ["VERI_OUTPUT_DIR"])
kind = task.get("fault", "ok")

if kind == "ok":
    (out / "answer.txt").write_text(str(task["n"] * 2))
    print("ok", os.environ["VERI_ROLLOUT_ID"])
elif kind == "exit":
    print("boom", file=sys.stderr)
    sys.exit(3)
elif kind == "silent":
    sys.exit(1)
elif kind == "hang":
    # A grandchild in its own session, re-parented away from the harness: it must die with the sandbox.
    delay = task["grandchild_delay"]
    subprocess.Popen([sys.executable, "-c", f"""
import os, pathlib, time
if os.fork() == 0:
    os.setsid()
    pathlib.Path(os.environ["VERI_OUTPUT_DIR"], "grandchild-started").write_text(str(time.time()))
    time.sleep({delay})
    pathlib.Path(os.environ["VERI_OUTPUT_DIR"], "grandchild-alive").write_text("x")
"""])
    print("hanging", flush=True)
    time.sleep(600)
elif kind == "forkbomb":
    subprocess.Popen(["bash", "-c", ":(){ :|:& };:"], stderr=subprocess.DEVNULL)
    time.sleep(3)
    print("survived", flush=True)
    os._exit(0)
elif kind == "memhog":
    hog = []
    for i in range(100):
        hog.append(b"x" * (50 << 20))
        print(f"{(i + 1) * 50} MB", flush=True)
    print("not killed")
elif kind == "loud":
    line = "y" * 1023 + "\n"
    for _ in range(100 * 1024):  # 100 MiB
        sys.stdout.write(line)
    print("LAST LINE")
elif kind == "bigout":
    (out / "a-answer.txt").write_text("small")
    with open(out / "b-big.bin", "wb") as f:
        block = b"z" * (1 << 20)
        for _ in range(1024):  # 1 GiB
            f.write(block)
    print("wrote 1 GiB")
elif kind == "nocall":
    print("done without calling the model")
elif kind == "probe":
    from concurrent.futures import ThreadPoolExecutor

    def connect(target):
        host, port = target
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((host, port))
            return f"{host}:{port}", "open"
        except OSError as exc:
            return f"{host}:{port}", type(exc).__name__
        finally:
            s.close()

    with ThreadPoolExecutor(16) as pool:
        result = {"connect": dict(pool.map(connect, task["targets"]))}
    result["docker_sock"] = [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)]
    result["env"] = dict(os.environ)
    result["uid"] = os.getuid()
    result["cwd"] = os.getcwd()
    result["proc_status"] = open("/proc/self/status").read()
    result["dmesg"] = subprocess.run(["dmesg"], capture_output=True, text=True).stdout[:2000]
    writable = {}
    for folder in ("/", "/etc", "/harness", "/tmp", "/work", os.environ.get("HOME", "/"), str(out)):
        try:
            pathlib.Path(folder, ".w").write_text("x")
            writable[folder] = True
        except OSError:
            writable[folder] = False
    result["writable"] = writable
    (out / "probe.json").write_text(json.dumps(result))
elif kind == "timestamp":
    pass
elif kind == "resolve":  # the model server's address as this sandbox resolves it, after a while
    from urllib.parse import urlsplit

    time.sleep(task.get("sleep_s", 0))
    host = urlsplit(os.environ["OPENAI_BASE_URL"]).hostname
    (out / "resolved.txt").write_text(socket.gethostbyname(host))
    (out / "hosts.txt").write_text(pathlib.Path("/etc/hosts").read_text())
    sys.exit(task.get("code", 0))
else:
    sys.exit(f"unknown fault {kind}")

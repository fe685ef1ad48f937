"""One harness, every harness fault of docs/reliability.md's training step: the task row lists a fault per rollout index
(`faults`), so one GRPO group mixes healthy and broken members. Every kind but crash_early first makes
one model call through the capture proxy (stdlib urllib: cheap to start on 2 cores) and notes it in
VERI_OUTPUT_DIR/calls, so a lost span would show. Children meant to die with the sandbox (the hang's
grandchild, a sentinel among the fork's children) keep rewriting VERI_OUTPUT_DIR/escaped-* (a host
folder) from 5 s after their start: deleted once the job is over and that long has passed, such a file
comes back only if one outlived its sandbox."""
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

task = json.loads(os.environ["VERI_TASK"])
fault = task["faults"][int(os.environ["VERI_ROLLOUT_INDEX"])]
out = pathlib.Path(os.environ["VERI_OUTPUT_DIR"])
KEEP_REWRITING = """
import pathlib, time
time.sleep(5)
while True:
    pathlib.Path({path!r}).write_text("alive")
    time.sleep(1)
"""


def call_model() -> str:
    url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
    body = json.dumps({"model": os.environ["VERI_POLICY_MODEL"],
                       "messages": [{"role": "user", "content": task["prompt"]}]}).encode()
    headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=300) as reply:
        answer = json.load(reply)["choices"][0]["message"]["content"] or ""
    (out / "calls").write_text("1")
    return answer


def answer_and_exit(answer: str) -> None:
    (out / "answer.txt").write_text(answer)
    print("answer:", answer[:80], flush=True)
    os._exit(0)  # at once: no interpreter teardown next to forked children


def spam(mib: int) -> None:
    line = b"y" * 1023 + b"\n"
    block = line * 1024  # 1 MiB
    for _ in range(mib):
        sys.stdout.buffer.write(block)
    sys.stdout.buffer.write(b"LAST LINE\n")
    sys.stdout.flush()


if fault == "crash_early":
    sys.exit("crashing before any model call")
answer = call_model()
if fault == "ok":
    answer_and_exit(answer)
elif fault == "crash":
    raise RuntimeError("harness bug after its model call")
elif fault == "hang":
    # a grandchild in its own session, re-parented away from the harness: it must die with the sandbox
    subprocess.Popen([sys.executable, "-c", "import os\nif os.fork() == 0:\n    os.setsid()\n"
                      + KEEP_REWRITING.format(path=str(out / "escaped-hang")).replace("\n", "\n    ")])
    print("hanging", flush=True)
    time.sleep(3600)
elif fault == "fork":
    # Children until `ulimit nproc` refuses one: each a `sh` and its `sleep`, through posix_spawn (vfork:
    # nothing of this Python is copied, half a fork()'s cost under gVisor). One in 32 is a sentinel that
    # keeps rewriting escaped-fork; not all: a hundred shells each spawning a `sleep` every second starve
    # the forks of the sandbox's one CPU (past harness_timeout_s on a loaded 2-core box).
    marker = out / "escaped-fork"
    sentinel = f"sleep 5; while :; do echo alive > {marker}; sleep 1; done"
    children = 0
    try:
        while children < 100_000:
            os.posix_spawn("/bin/sh", ["sh", "-c", sentinel if children % 32 == 0 else "sleep 3600"], {})
            children += 1
    except OSError as error:
        print(f"fork refused after {children} children: {error.strerror}", flush=True)
    answer_and_exit(answer)
elif fault == "memhog":
    hog = []
    for i in range(160):  # 8 GB in 50 MB steps: far past any sandbox's memory limit
        hog.append(b"x" * (50 << 20))
        print(f"{(i + 1) * 50} MB", flush=True)
    print("not killed", flush=True)
elif fault == "spam":
    spam(task["spam_mib"])
    answer_and_exit(answer)
elif fault == "spam_huge":  # without end: only the launcher's log ceiling (or the timeout) stops it
    while True:
        spam(1024)
else:
    sys.exit(f"unknown fault {fault!r}")

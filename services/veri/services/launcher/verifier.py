"""A Harbor task's verifier: the script the docker backend runs after the agent, and the reading of
what it printed (docs/security.md, "Harbor tasks: the verifier").

The script runs as a privileged `docker exec` in the sandbox's first PID namespace (the agent's
processes live in a namespace of their own and cannot see it), inside `unshare -m`: it mounts fresh
tmpfs over the read-only mount points /tests, /logs/verifier and /veri/verify (so nothing the agent
left there, or writes there meanwhile, is what the verifier reads), unpacks the tests from its stdin,
drops to Docker's default capabilities and the task's verifier user, runs `timeout T bash
/tests/test.sh` from the workdir, and prints the reward files and a tar of /logs/verifier on its own
stdout between markers carrying a nonce. Nothing is read back from a file system the agent can write.

Reward files are read as Harbor does: reward.json (an object; numeric keys kept, others named) before
reward.txt (one number; reward.txt's value joins reward.json as `reward` when the JSON has none).
Unlike Harbor, a value that is not finite (nan, inf), an empty or unreadable file is an error (the
`verifier_error` verdict), never a score.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import tarfile
from dataclasses import dataclass

from veri.core.launch import VerifierResult
from veri.core.rules import VerifierError
from veri.services.launcher.task_runtime.verifier_tools import verifier_env

TESTS_MOUNT = "/tests"
VERIFIER_LOGS = "/logs/verifier"
SCRATCH_MOUNT = "/veri/verify"  # the verifier's private HOME and caches (a fresh tmpfs per verification)
REWARD_FILE_MAX = 64 * 1024
FILES_TAR_MAX = 8 << 20  # /logs/verifier's tar, before base64
FILE_TEXT_MAX = 256 * 1024  # each file kept in VerifierResult.files (its tail)
TAIL_MAX = 16 * 1024
TIMEOUT_KILL_AFTER_S = 5
TIMEOUT_EXITS = (124, 137)  # timeout(1): the limit passed (137: it had to KILL)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker's default capability set: test.sh runs as an ordinary container root would (setpriv's names)
DEFAULT_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
                "net_bind_service", "sys_chroot", "mknod", "audit_write", "setfcap")

# $1 nonce, $2 workdir, $3 timeout (s), $4 verifier user ("": root), $5 the PATH of veri's own steps.
# PATH on entry is the one test.sh gets. The tools veri runs itself are looked up on $5 once, before
# test.sh, and called by their paths.
SCRIPT = r"""
N=$1 WORKDIR=$2 T=$3 VUSER=$4
TEST_PATH=$PATH PATH=$5; export PATH
fail() { echo "==veri:$N:error== $1"; exit 0; }
mount -t tmpfs -o mode=0755,size=512m veri-tests /tests || fail "could not mount a fresh /tests"
mount -t tmpfs -o mode=0755,size=512m veri-verifier /logs/verifier || fail "could not mount a fresh /logs/verifier"
mount -t tmpfs -o mode=0755,size=1g veri-scratch /veri/verify || fail "could not mount a fresh /veri/verify"
if [ -e /etc/ld.so.preload ] || [ -L /etc/ld.so.preload ]; then
  mount --bind /dev/null /etc/ld.so.preload || fail "could not neutralise /etc/ld.so.preload"
fi
tar -x -C /tests || fail "the tests could not be unpacked into /tests"
chmod -R a+rX /tests; find /tests -type f -name '*.sh' -exec chmod a+x {} +
mkdir -p /veri/verify/home /veri/verify/uv-cache
SETPRIV=$(command -v setpriv) TIMEOUT=$(command -v timeout) || fail "setpriv or timeout missing"
ids=""
if [ -n "$VUSER" ] && [ "$VUSER" != root ] && [ "$VUSER" != 0 ]; then
  G=$(id -g "$VUSER") || fail "the verifier user $VUSER is not in the image"
  chown "$VUSER" /logs/verifier /veri/verify/home /veri/verify/uv-cache || fail "could not chown to $VUSER"
  ids="--reuid=$VUSER --regid=$G --init-groups"
fi
cd "$WORKDIR" 2>/dev/null || cd /
HOME=/veri/verify/home PATH=$TEST_PATH; export HOME PATH
# shellcheck disable=SC2086
"$SETPRIV" --bounding-set=-all,CAPS $ids "$TIMEOUT" -k KILL_AFTER "$T" bash /tests/test.sh \
  </dev/null >/logs/verifier/test-stdout.txt 2>&1
status=$?
PATH=$5; export PATH
echo "==veri:$N:exit== $status"
for f in reward.txt reward.json; do
  if [ -f "/logs/verifier/$f" ] && [ ! -L "/logs/verifier/$f" ]; then
    echo "==veri:$N:$f=="; head -c REWARD_MAX "/logs/verifier/$f" | base64
  fi
done
echo "==veri:$N:files=="; tar -C /logs/verifier -c . 2>/dev/null | head -c FILES_MAX | base64
echo "==veri:$N:end=="
""".replace("CAPS", ",".join(f"+{cap}" for cap in DEFAULT_CAPS)).replace("KILL_AFTER", str(TIMEOUT_KILL_AFTER_S)) \
    .replace("REWARD_MAX", str(REWARD_FILE_MAX)).replace("FILES_MAX", str(FILES_TAR_MAX))


def command(nonce: str, workdir: str, timeout_s: float, user: str | None, setup_path: str,
            own_network: bool = False) -> list[str]:
    """The verifier exec's command (run as root, privileged, with the tests' tar on its stdin). `own_network`:
    in a network namespace of its own too (loopback only), where the sandbox's network cannot be taken away."""
    return ["unshare", "-m", *(["-n"] if own_network else []), "--propagation", "private", "sh", "-c", SCRIPT,
            "veri-verify", nonce, workdir, f"{max(1, math.ceil(timeout_s))}", user or "", setup_path]


def path_for_tests(image_path: str | None, task_env: dict[str, str], verifier_env_: dict[str, str],
                   tools: bool) -> str:
    """test.sh's PATH: the task's (verifier env, then task env, then image), veri's offline tools first."""
    path = verifier_env_.get("PATH") or task_env.get("PATH") or image_path or SYSTEM_PATH
    return verifier_env(path, scratch=SCRATCH_MOUNT)["PATH"] if tools else path


def tools_env(tools: bool, runtime: bool) -> dict[str, str]:
    """Variables that keep uv and pip offline and on veri's vendored wheels (tools mounted): verifier_env's,
    less PATH (path_for_tests) and HOME (the script sets it)."""
    if not tools:
        return {}
    env = verifier_env(scratch=SCRATCH_MOUNT, runtime=runtime)
    return {name: value for name, value in env.items() if name not in ("PATH", "HOME")}


@dataclass(frozen=True)
class Sections:
    """The verifier's stdout cut at its markers: section name -> its text."""

    parts: dict[str, str]

    @classmethod
    def parse(cls, stdout: str, nonce: str) -> Sections:
        prefix = f"==veri:{nonce}:"
        parts: dict[str, str] = {}
        current: str | None = None
        lines: list[str] = []
        for line in stdout.splitlines():
            if line.startswith(prefix) and "==" in line[len(prefix):]:
                if current is not None:
                    parts[current] = "\n".join(lines)
                name, _, rest = line[len(prefix):].partition("==")
                current, lines = name, ([rest.strip()] if rest.strip() else [])
                if name == "end":  # nothing after it counts (a process left behind may still hold the pipe)
                    break
            elif current is not None:
                lines.append(line)
        if current is not None:
            parts[current] = "\n".join(lines)
        return cls(parts)

    def decoded(self, name: str) -> bytes | None:
        if name not in self.parts:
            return None
        try:
            return base64.b64decode("".join(self.parts[name].split()), validate=True)
        except (binascii.Error, ValueError):
            return b""


def result(stdout: str, stderr: str, nonce: str, timeout_s: float, duration_s: float) -> VerifierResult:
    """The VerifierResult of one verifier exec's output."""
    sections = Sections.parse(stdout, nonce)
    files = _files(sections.decoded("files") or b"")
    base = VerifierResult(stdout_tail=files.get("test-stdout.txt", "")[-TAIL_MAX:], stderr_tail=stderr[-TAIL_MAX:],
                          files=files, duration_s=duration_s)
    if "error" in sections.parts:
        return base.model_copy(update={"error": VerifierError.ERROR, "message": "the verifier could not run: "
                                       f"{sections.parts['error'].strip()}"})
    if "end" not in sections.parts or "exit" not in sections.parts:
        return base.model_copy(update={"error": VerifierError.ERROR, "message": "the verifier ended before it "
                                       f"printed the reward (its stderr: {stderr.strip()[-300:] or 'empty'})"})
    exit_text = sections.parts["exit"].strip()
    exit_code = int(exit_text) if exit_text.isdigit() else None
    if exit_code in TIMEOUT_EXITS:
        return base.model_copy(update={"error": VerifierError.TIMEOUT, "exit_code": exit_code, "message": (
            f"the task's test.sh ran past the task's [verifier] timeout_sec ({timeout_s:g} s) and was killed")})
    error, message, rewards, ignored = read_rewards(sections.decoded("reward.txt"), sections.decoded("reward.json"))
    return VerifierResult.model_validate({**base.model_dump(), "error": error, "message": message,
                                          "exit_code": exit_code, "rewards": rewards, "reward": rewards.get("reward"),
                                          "ignored_keys": ignored})


def read_rewards(txt: bytes | None, js: bytes | None) -> tuple[VerifierError, str, dict[str, float], list[str]]:
    """(error, message, rewards, ignored keys) from the two reward files' bytes (None: absent)."""
    if txt is None and js is None:
        return (VerifierError.NO_REWARD, "the task's test.sh wrote neither /logs/verifier/reward.txt nor "
                "/logs/verifier/reward.json: the task's test.sh must write one on every path (0 when the tests "
                "fail)", {}, [])
    rewards: dict[str, float] = {}
    ignored: list[str] = []
    if js is not None:
        try:
            data = json.loads(js.decode())
        except (UnicodeDecodeError, ValueError) as exc:
            return VerifierError.ERROR, f"reward.json is not JSON ({exc})", {}, []
        if not isinstance(data, dict):
            return VerifierError.ERROR, "reward.json is not a JSON object of numbers", {}, []
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                ignored.append(str(key))
                continue
            if not math.isfinite(value):
                return VerifierError.ERROR, f"reward.json's {key!r} is {value}, not a finite number", {}, []
            rewards[str(key)] = float(value)
        if not rewards and txt is None:
            return VerifierError.ERROR, ("reward.json holds no number (keys: "
                                         f"{', '.join(ignored) or 'none'})"), {}, ignored
    if txt is not None and "reward" not in rewards:
        text = txt.decode(errors="replace").strip()
        if not text:
            return VerifierError.ERROR, "reward.txt is empty: test.sh must write one number to it", {}, []
        try:
            value = float(text)
        except ValueError:
            return VerifierError.ERROR, f"reward.txt holds {text[:80]!r}, not a number", {}, []
        if not math.isfinite(value):
            return VerifierError.ERROR, f"reward.txt holds {text[:80]!r}, not a finite number", {}, []
        rewards["reward"] = value
    return VerifierError.NONE, "", rewards, ignored


def _files(data: bytes) -> dict[str, str]:
    """/logs/verifier's regular files as text (each its last FILE_TEXT_MAX bytes); a cut tar gives what it has."""
    files: dict[str, str] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                content = handle.read()
                files[member.name.removeprefix("./")] = content[-FILE_TEXT_MAX:].decode(errors="replace")
    except (tarfile.TarError, EOFError, OSError):
        pass
    return files

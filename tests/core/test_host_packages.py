"""A minimal Debian 12 with python3 lacks python3-venv (make venv), python3-pip and npm (make vendor): the set-up
installs them the way make docker installs its packages, by one rule (scripts/host-packages.sh: as root on Debian,
where nothing else owns the host's packages), and elsewhere stops at once with one line naming the command. Run as
make runs them, with the tools hidden by a PATH of links (tests/hidden_tools.py) and apt-get stood in for: nothing
is installed on, or removed from, this machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hidden_tools import path_without

pytestmark = pytest.mark.needs("process")

REPO = Path(__file__).resolve().parents[2]
RUNSC_MIN = 20240729  # scripts/docker/setup.sh


def host_env(tmp_path: Path, hidden: set[str], **settings: str) -> dict[str, str]:
    """This machine's environment less the tools `hidden` and any install switch, a stand-in apt-get first on PATH
    (tests/core/test_host_packages.py never lets a real one run)."""
    stand_ins = tmp_path / "stand-ins"
    stand_ins.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("CI", "VERI_INSTALL_PACKAGES", "VERI_INSTALL_DOCKER", "MAKEFLAGS", "MAKELEVEL")}
    env["PATH"] = f"{stand_ins}:{path_without(hidden | {'apt-get'}, tmp_path / 'bin')}"
    return env | settings


def stand_in(env: dict[str, str], name: str, script: str) -> Path:
    path = Path(env["PATH"].split(":")[0]) / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def stand_in_apt(env: dict[str, str], *, installs: str = "", status: int = 0) -> Path:
    """apt-get that records each call; `installs`: a shell snippet run on `install` (what the package would put
    on PATH); `status`: its exit status."""
    calls = Path(env["PATH"].split(":")[0]).parent / "apt-get.calls"
    stand_in(env, "apt-get", f'echo "$*" >>{calls}\ncase " $* " in *" install "*) {installs or ":"} ;; esac\n'
                             f"exit {status}\n")
    return calls


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def ours(stderr: str, who: str) -> list[str]:
    """The lines the set-up printed as `who` (not make's own `*** Error` line)."""
    return [line for line in stderr.splitlines() if line.startswith(f"{who}: ")]


def calls_of(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_make_vendor_without_npm_stops_at_once_with_the_command(tmp_path: Path):
    env = host_env(tmp_path, {"npm"}, VERI_INSTALL_PACKAGES="0")
    calls = stand_in_apt(env)
    assert shutil.which("npm", path=env["PATH"]) is None
    done = run(["make", "--no-print-directory", "vendor-npm", f"VENDOR={tmp_path / 'vendor'}"], env)
    assert done.returncode != 0 and "command not found" not in done.stderr, done.stderr
    assert ours(done.stderr, "make vendor") == [
        "make vendor: needs npm (`command -v npm` failed): apt-get install npm (Debian; as root with"
        " VERI_INSTALL_PACKAGES=1, make installs them itself), then rerun"]
    assert calls_of(calls) == [] and not (tmp_path / "vendor").exists()  # nothing installed, nothing fetched


def test_make_vendor_installs_npm_where_make_docker_would_install_its_packages(tmp_path: Path):
    """Root on Debian with CI=true (as .ci/run on a fresh machine): apt installs npm, then the step goes on."""
    env = host_env(tmp_path, {"npm"}, CI="true")
    folder = env["PATH"].split(":")[0]
    # What the package puts on PATH: an npm whose `pack` writes a tarball per package into --pack-destination.
    npm = ('while [ $# -gt 0 ]; do case $1 in --pack-destination) dest=$2; shift ;; @*) '
           'echo "$1" >"$dest/$(echo "${1#@}" | tr /@ --).tgz" ;; esac; shift; done')
    installs = f"printf '#!/bin/sh\\n%s\\n' '{npm}' >{folder}/npm; chmod 755 {folder}/npm"
    calls = stand_in_apt(env, installs=installs)
    done = run(["make", "--no-print-directory", "vendor-npm", f"VENDOR={tmp_path / 'vendor'}"], env)
    assert done.returncode == 0, done.stderr
    assert ours(done.stderr, "make vendor") == ["make vendor: installing npm with apt"]
    assert [re.sub(r"^-o \S+ ", "", call) for call in calls_of(calls)] == [
        "update -q", "install -y -q --no-install-recommends npm"]
    assert all("DPkg::Lock::Timeout" in call for call in calls_of(calls))  # another install may hold the lock
    assert sorted(path.name for path in (tmp_path / "vendor/npm").glob("*.tgz"))  # the step went on


def test_make_vendor_without_pip_names_python3_pip(tmp_path: Path):
    """vendor-wheels.sh downloads the images' wheels with the host's `python3 -m pip`: Debian's python3 has no pip
    without python3-pip."""
    env = host_env(tmp_path, set(), VERI_INSTALL_PACKAGES="0")
    stand_in(env, "python3", f'[ "$1 $2" = "-m pip" ] && {{ echo "python3: No module named pip" >&2; exit 1; }}\n'
                             f'exec {sys.executable} "$@"\n')
    calls = stand_in_apt(env)
    done = run(["make", "--no-print-directory", "vendor-wheels", f"VENDOR={tmp_path / 'vendor'}"], env)
    assert done.returncode != 0
    assert ours(done.stderr, "make vendor") == [
        "make vendor: needs python3-pip (`python3 -m pip --version` failed): apt-get install python3-pip (Debian;"
        " as root with VERI_INSTALL_PACKAGES=1, make installs them itself), then rerun"], done.stderr
    assert calls_of(calls) == [] and not list((tmp_path / "vendor").rglob("*.whl"))


def test_make_venv_without_ensurepip_names_python3_venv(tmp_path: Path):
    """Debian's python3 makes a venv only with python3-venv (its ensurepip): the python given here has none."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ensurepip.py").write_text("raise ImportError('no ensurepip: as Debian without python3-venv')\n")
    python = tmp_path / "python3-without-venv"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={shadow} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    venv = tmp_path / "venv"
    make = ["make", "--no-print-directory", "venv", f"VENV={venv}", f"PYTHON={python}"]
    env = host_env(tmp_path, set(), VERI_INSTALL_PACKAGES="0", PIP_NO_INDEX="1")
    calls = stand_in_apt(env)
    done = run(make, env)
    assert done.returncode != 0 and "ensurepip is not available" not in done.stderr
    assert ours(done.stderr, "make venv") == [
        f"make venv: needs python3-venv (`{python} -c 'import ensurepip'` failed): apt-get install python3-venv"
        " (Debian; as root with VERI_INSTALL_PACKAGES=1, make installs them itself), then rerun"], done.stderr
    assert calls_of(calls) == [] and not venv.exists()
    # Where make docker would install, it installs python3-venv (here the stand-in installs nothing: it says so).
    env |= {"CI": "true", "VERI_INSTALL_PACKAGES": ""}
    done = run(make, env)
    assert calls_of(calls)[-1].endswith("install -y -q --no-install-recommends python3-venv"), calls_of(calls)
    assert ours(done.stderr, "make venv")[-1] == (f"make venv: `{python} -c 'import ensurepip'` still fails after"
                                                  " installing python3-venv") and not venv.exists()


def test_a_user_who_is_not_root_is_told_sudo(tmp_path: Path):
    env = host_env(tmp_path, {"npm"}, CI="true")
    stand_in(env, "id", '[ "$1" = -u ] && echo 1000 || exec /usr/bin/id "$@"\n')
    calls = stand_in_apt(env)
    done = run(["scripts/host-packages.sh", "make vendor", "npm=command -v npm"], env)
    assert done.returncode == 1 and "make vendor: needs npm (`command -v npm` failed): sudo apt-get install npm" \
        in done.stderr and calls_of(calls) == []


def _runsc_date() -> int:
    found = re.search(r"20\d{6}", subprocess.run(["runsc", "--version"], capture_output=True, text=True).stdout) \
        if shutil.which("runsc") else None
    return int(found.group()) if found else 0


@pytest.mark.parametrize("switch", ["VERI_INSTALL_PACKAGES", "VERI_INSTALL_DOCKER"])
def test_make_docker_keeps_the_same_rule(tmp_path: Path, switch: str):
    """setup.sh takes the rule and the install from scripts/host-packages.sh. With docker hidden: 0 refuses (the
    switch's old name too), CI=true installs (the stand-in apt-get fails, so nothing after it runs)."""
    if not shutil.which("docker-compose") or _runsc_date() < RUNSC_MIN:
        pytest.skip("needs this machine's runsc and docker-compose, so that docker.io alone is missing")
    env = host_env(tmp_path, {"docker", "dockerd"}, **{switch: "0"})
    calls = stand_in_apt(env, status=100)
    done = run(["scripts/docker/setup.sh"], env)
    assert done.returncode == 1 and "make docker: missing: docker.io" in done.stderr, done.stderr
    assert "with VERI_INSTALL_PACKAGES=1" in done.stderr and calls_of(calls) == []
    env |= {switch: "", "CI": "true"}
    done = run(["scripts/docker/setup.sh"], env)
    assert done.returncode == 1 and ours(done.stderr, "make docker")[0] == "make docker: installing docker.io with apt"
    failed = ours(done.stderr, "make docker")[-1]
    assert failed.startswith("make docker: apt-get failed (log: /tmp/veri-apt."), failed
    Path(failed.split("(log: ")[1].rstrip(")")).unlink()  # kept for a person to read; not this test's
    assert [re.sub(r"^-o \S+ ", "", call) for call in calls_of(calls)] == ["update -q"]

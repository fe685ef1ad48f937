"""The dev-only local backend: statuses, tails, output cap, timeouts kill grandchildren."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.waiting import alive, wait_for
from veri.core.launch import GroupLaunch, RolloutLaunch, SandboxLimits
from veri.services.launcher.group import run_group
from veri.services.launcher.local import LocalBackend


def bundle(tmp_path: Path, name: str, script: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "veri-harness.toml").write_text(f'name = "{name}"\nentrypoint = ["python", "main.py"]\n')
    (folder / "main.py").write_text(script)
    return folder


def launch(folder: Path, rollout_id: str, **kw) -> RolloutLaunch:
    return RolloutLaunch(rollout_id=rollout_id, image=str(folder), env={"VERI_ROLLOUT_ID": rollout_id},
                         timeout_s=kw.pop("timeout_s", 30), **kw)


@pytest.mark.needs("process")
def test_group_statuses_are_independent(tmp_path, monkeypatch):
    ok = bundle(tmp_path, "ok", "import os, pathlib\nprint('hello', os.environ['VERI_ROLLOUT_ID'])\n"
                                 "pathlib.Path(os.environ['VERI_OUTPUT_DIR'], 'answer.txt').write_text('42')\n"
                                 "assert 'HOSTONLY' not in os.environ\n")
    bad = bundle(tmp_path, "bad", "import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    marker, grandchild = tmp_path / "grandchild-alive", tmp_path / "grandchild.pid"
    hang = bundle(tmp_path, "hang", "import pathlib, subprocess, sys, time\n"
                                    "child = subprocess.Popen([sys.executable, 'grandchild.py'])\n"
                                    f"pathlib.Path({str(grandchild)!r}).write_text(str(child.pid))\n"
                                    "time.sleep(600)\n")
    # Past the harness's timeout (3 s), a grandchild that survived it writes the marker, then exits.
    (hang / "grandchild.py").write_text(
        f"import pathlib, time\ntime.sleep(6)\npathlib.Path({str(marker)!r}).write_text('x')\n")
    loud = bundle(tmp_path, "loud", "import sys\nfor _ in range(2000): sys.stdout.write('y' * 50_000 + '\\n')\n")
    hog = bundle(tmp_path, "hog", "import os, pathlib\nd = pathlib.Path(os.environ['VERI_OUTPUT_DIR'])\n"
                                  "for i in range(5): (d / f'f{i}').write_bytes(b'z' * 1_000_000)\n")
    monkeypatch.setenv("HOSTONLY", "secret")
    group = GroupLaunch(max_parallel=5, launches=[
        launch(ok, "r-ok"), launch(bad, "r-bad"), launch(hang, "r-hang", timeout_s=3),
        launch(loud, "r-loud"), launch(hog, "r-hog", limits=SandboxLimits(output_max_bytes=2_500_000)),
    ])
    results = {r.rollout_id: r for r in asyncio.run(run_group(LocalBackend(), group, tmp_path / "out"))}
    assert results["r-ok"].status == "completed" and "hello r-ok" in results["r-ok"].stdout_tail
    assert (Path(results["r-ok"].output_dir) / "answer.txt").read_text() == "42"
    assert results["r-bad"].status == "failed" and results["r-bad"].exit_code == 3
    assert "boom" in results["r-bad"].stderr_tail
    assert results["r-hang"].status == "truncated" and results["r-hang"].exit_code is None
    assert results["r-loud"].status == "completed" and len(results["r-loud"].stdout_tail) < 70_000
    assert "earlier bytes dropped" in results["r-loud"].stdout_tail
    assert results["r-hog"].output_truncated and len(list(Path(results["r-hog"].output_dir).iterdir())) == 2
    # Killed with its harness, the grandchild is gone at once; had it survived, it is gone once it wrote.
    wait_for(lambda: not alive(int(grandchild.read_text())), "the timed-out harness's grandchild to end")
    assert not marker.exists(), "the timed-out harness's grandchild survived"


def test_missing_bundle_is_a_failed_result_not_a_crash(tmp_path):
    [result] = asyncio.run(run_group(LocalBackend(), GroupLaunch(launches=[launch(tmp_path / "nope", "r-x")]),
                                     tmp_path / "out"))
    assert result.status == "failed" and "veri-harness.toml" in result.infrastructure_error

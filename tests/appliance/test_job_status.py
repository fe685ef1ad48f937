"""`veri job status`: a job's state from its folder, what `make train` prints when it is stopped."""

from __future__ import annotations

import json

from veri.cli import main


def test_status_names_the_checkpoint_a_resume_starts_from(tmp_path, capsys):
    job = tmp_path / "jobs" / "demo"
    (job / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (job / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (job / "checkpoints" / "checkpoint-3").mkdir()  # a save cut short: no trainer_state.json
    (job / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n')
    assert main(["job", "status", "demo", "--jobs", str(tmp_path / "jobs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"job: {job}", "last_step: 2", f"checkpoint: {job}/checkpoints/checkpoint-2", "resume_step: 2",
                   "model: -"]
    assert main(["job", "status", str(job), "--field", "checkpoint"]) == 0
    assert capsys.readouterr().out == f"{job}/checkpoints/checkpoint-2\n"


def test_an_unknown_job_says_where_it_looked(tmp_path, capsys):
    assert main(["job", "status", "nope", "--jobs", str(tmp_path)]) == 2
    assert f"no job folder {tmp_path}/nope" in capsys.readouterr().out

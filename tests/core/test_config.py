"""The job config: YAML = TOML, every schema problem at once with its fix, the trainer's checks through
its hook (the checks against real TRL: tests/trainer/test_grpo_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.jobs import job, write_job, write_model
from veri.core.config import JobConfig, RewardConfig, SamplingConfig, parse_config, read_config_file
from veri.core.dataset import DatasetConfig
from veri.core.problems import Problem
from veri.gpu.job import plan_job
from veri.gpu.planner import GpuInventory, GpuVendor, LayoutError
from veri.validation.job_checks import PER_TOKEN_LOSSES, UNEVEN_LOSSES, TrainerChecks
from veri.validation.run import check_config

REPO = Path(__file__).resolve().parents[2]


def problems_by_place(report) -> dict[str, str]:
    return {problem.where: f"{problem.message} | {problem.fix}" for problem in report.problems}


def test_yaml_and_toml_examples_are_the_same_job():
    yaml_job = parse_config(read_config_file(REPO / "config/url_extract.yaml"), base_dir=REPO)
    toml_job = parse_config(read_config_file(REPO / "config/url_extract.toml"), base_dir=REPO)
    assert yaml_job == toml_job
    assert yaml_job.dataset.path == REPO / "config/data/url_extract.jsonl"
    assert yaml_job.learning_rate == 1e-6


def test_cpu_example_parses():
    config = parse_config(read_config_file(REPO / "config/url_extract_cpu.yaml"), base_dir=REPO)
    assert config.backend == "hf" and config.model == REPO / "build/models/smollm2"


def test_a_complete_job_has_no_problems(job_dir: Path):
    report = check_config(write_job(job_dir, job()), base_dir=job_dir)
    assert report.problems == []
    assert report.config is not None and report.config.model == job_dir / "models/policy"
    assert any("3 tasks" in note for note in report.notes)


def test_missing_path_is_checked_even_when_another_field_is_broken(job_dir: Path):
    config = job(dataset={"path": "data/missing.jsonl"}, max_steps="lots")
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir))
    assert set(found) == {"dataset.path", "max_steps"}


def test_missing_keys_name_what_they_are(job_dir: Path):
    config = job()
    del config["harness_bundle"], config["rewards"]
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir))
    assert "add `harness_bundle` (launcher: the harness bundle folder" in found["harness_bundle"]
    assert "is required" in found["rewards"]


def test_knobs_that_cannot_act_are_problems(job_dir: Path):
    config = job(vllm_gpu_memory_utilization=0.8, max_model_len=8192, lora_alpha=16, sampling={"max_tokens": 9000})
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir))
    assert "only applies to `backend: vllm`" in found["vllm_gpu_memory_utilization"]
    assert "only applies to `backend: vllm`" in found["max_model_len"]
    assert "does nothing without `lora_rank`" in found["lora_alpha"]
    assert "more than max_response_length" in found["sampling.max_tokens"]


def test_bundle_manifest_is_read_and_agrees_with_the_job(job_dir: Path):
    found = problems_by_place(check_config(write_job(job_dir, job(harness_protocol="anthropic")), base_dir=job_dir))
    assert "bundle's veri-harness.toml says openai" in found["harness_protocol"]
    (job_dir / "bundle" / "veri-harness.toml").unlink()
    found = problems_by_place(check_config(write_job(job_dir, job()), base_dir=job_dir))
    assert "has no veri-harness.toml" in found["harness_bundle"]


@pytest.mark.parametrize("manifest, reported", [
    # Each of these only `veri harness build` refused before: one manifest check now serves both.
    ('name = "agent"\nentrypoint = ["python", "main.py"]\n', "entrypoint names 'main.py', which is not in the bundle"),
    ('name = "agent"\nentrypoint = ["python", "agent.py"]\n[deps]\nnpm = ["Not A Spec!"]\n',
     "deps.npm entry 'Not A Spec!' is not an npm package spec"),
    ('name = "agent"\nentrypoint = ["python", "agent.py"]\n[deps]\nrequirements = "../outside.txt"\n',
     "points outside the bundle"),
    ('name = "agent"\nentrypoint = ["python", "agent.py"]\nbase = "veri/base"\n', "fix: remove it; known fields"),
])
def test_validate_refuses_what_harness_build_refuses(job_dir: Path, manifest: str, reported: str):
    (job_dir / "outside.txt").write_text("requests\n")
    (job_dir / "bundle" / "veri-harness.toml").write_text(manifest)
    found = problems_by_place(check_config(write_job(job_dir, job()), base_dir=job_dir))
    assert reported in found["harness_bundle"]


def test_a_shell_snippet_in_the_entrypoint_is_not_taken_for_a_file(job_dir: Path):
    (job_dir / "bundle" / "veri-harness.toml").write_text(
        'name = "agent"\nentrypoint = ["sh", "-c", "cd /tmp && python /harness/agent.py"]\n')
    assert "harness_bundle" not in problems_by_place(check_config(write_job(job_dir, job()), base_dir=job_dir))
    (job_dir / "bundle" / "veri-harness.toml").write_text('name = "agent"\nentrypoint = ["sh", "./run.sh"]\n')
    found = problems_by_place(check_config(write_job(job_dir, job()), base_dir=job_dir))
    assert "entrypoint names './run.sh', which is not in the bundle" in found["harness_bundle"]


def test_context_length_against_the_model(job_dir: Path):
    write_model(job_dir / "models/policy", heads=16, positions=4096)
    config = job(backend="vllm", max_model_len=8192, max_response_length=8192, grpo={})
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir, gpus=GpuInventory.nvidia(2)))
    assert "more than the model's 4096 positions" in found["max_model_len"]
    assert "does not fit in max_model_len" in found["max_response_length"]


def test_missing_model_folder_says_how_to_get_one(job_dir: Path):
    found = problems_by_place(check_config(write_job(job_dir, job(model="/models/Qwen3-4B")), base_dir=job_dir))
    assert "/models/Qwen3-4B does not exist" in found["model"] and "never downloads" in found["model"]
    found = problems_by_place(check_config(write_job(job_dir, job(model="build/models/tiny")), base_dir=job_dir))
    assert f"veri model tiny --out {job_dir}/build/models/tiny" in found["model"]


def test_dataset_lines_are_checked(job_dir: Path):
    (job_dir / "data/tasks.jsonl").write_text('{"question": "q1"}\nnot json\n[1]\n')
    found = check_config(write_job(job_dir, job()), base_dir=job_dir).problems
    messages = [f"{p.where}: {p.message} | {p.fix}" for p in found]
    assert any("line 1: has no `prompt`" in m and "column_mapping" in m for m in messages)
    assert any("line 2: is not JSON" in m for m in messages)
    assert any("line 3: is a list" in m for m in messages)
    (job_dir / "data/tasks.jsonl").write_text('{"question": "q1", "expected_url": "u"}\n')
    renamed = job(dataset={"path": "data/tasks.jsonl", "column_mapping": {"question": "prompt"}})
    assert check_config(write_job(job_dir, renamed), base_dir=job_dir).problems == []


def test_layout_is_planned_for_the_given_gpus(job_dir: Path):
    path = write_job(job_dir, job(backend="vllm", grpo={}))
    report = check_config(path, base_dir=job_dir, gpus=GpuInventory.nvidia(4))
    assert report.problems == []
    assert any("TP=2 x DP=1 on GPUs 1,2" in note and "idle GPUs: 3" in note for note in report.notes)
    report = check_config(path, base_dir=job_dir, gpus=GpuInventory.nvidia(1))  # 1 GPU: shared, filesystem sync
    assert report.problems == []
    assert any("share GPU 0" in note and "weight sync: filesystem" in note for note in report.notes)
    report = check_config(path, base_dir=job_dir, gpus=GpuInventory.nvidia(0))
    assert "backend: hf" in problems_by_place(report)["backend"]


def test_layout_knobs_are_checked_against_the_plan(job_dir: Path):
    def found(gpus: int, **knobs) -> dict[str, str]:
        path = write_job(job_dir, job(backend="vllm", grpo={}, **knobs))
        return problems_by_place(check_config(path, base_dir=job_dir, gpus=GpuInventory.nvidia(gpus)))

    assert "set weight_sync: filesystem" in found(1, weight_sync="nccl")["weight_sync"]
    assert found(4, weight_sync="filesystem", vllm_data_parallel_size="auto") == {}
    assert "not a replica count" in found(4, vllm_data_parallel_size="many")["vllm_data_parallel_size"]
    assert "does not divide" in found(8, vllm_tensor_parallel_size=3)["vllm_tensor_parallel_size"]
    cpu = check_config(write_job(job_dir, job(backend="vllm", grpo={}, device="cpu", vllm_data_parallel_size=2)),
                       base_dir=job_dir)  # no GPU probe, no GPU needed
    assert cpu.problems == [] and any("vLLM CPU build" in note for note in cpu.notes)
    assert cpu.config is not None and plan_job(cpu.config).data_parallel_size == 2
    hf = problems_by_place(check_config(write_job(job_dir, job(weight_sync="nccl", device="cpu")), base_dir=job_dir))
    assert "only applies to `backend: vllm`" in hf["weight_sync"] and "only applies" in hf["device"]


@pytest.mark.parametrize("model", [JobConfig, DatasetConfig, RewardConfig, SamplingConfig])
def test_every_knob_says_what_uses_it(model):
    undocumented = [name for name, info in model.model_fields.items() if not info.description]
    assert undocumented == []


@pytest.mark.parametrize("backend", ["hf", "vllm"])
@pytest.mark.parametrize(("sampling", "where", "said"), [
    ({"temperature": 1e-6}, "sampling.temperature", "below veri's floor of 0.1"),
    ({"temperature": 0.05}, "sampling.temperature", "below veri's floor of 0.1"),
    ({"top_p": 0.9}, "sampling.top_p", "keeps only the top-p nucleus"),
    ({"top_k": 20}, "sampling.top_k", "keeps only the top k tokens"),
    ({"min_p": 0.05}, "sampling.min_p", "drops the tokens below min_p"),
    ({"repetition_penalty": 1.1}, "sampling.repetition_penalty", "penalises repeated tokens"),
    ({"presence_penalty": 0.5}, "sampling.presence_penalty", "penalises tokens already present"),
])
def test_sampling_the_trainer_cannot_score_is_refused_with_why(job_dir: Path, backend: str, sampling: dict,
                                                                where: str, said: str):
    """The trainer scores log_softmax(logits / temperature): any other processing, or a temperature the
    samplers treat as greedy, is refused on both backends, each with why and what to set instead."""
    cpu = {"device": "cpu"} if backend == "vllm" else {}  # the vLLM CPU twin: no GPU probe
    report = check_config(write_job(job_dir, job(backend=backend, grpo={}, sampling=sampling, **cpu)),
                          base_dir=job_dir)
    found = problems_by_place(report)
    assert list(found) == [where] and said in found[where]
    if where == "sampling.temperature":
        assert "set `sampling.temperature` to 0.1 or more" in found[where] and "veri eval" in found[where]
    elif where == "sampling.top_p":
        assert "set `sampling.top_p: 1.0`" in found[where]
    else:  # a key `sampling:` does not have: not "did you mean `top_p`?" but why it cannot be
        assert "remove it: a job samples with `sampling.temperature` alone" in found[where]
        assert "importance ratio is off, even at equal weights" in found[where]


def test_the_temperature_floor_is_allowed(job_dir: Path):
    report = check_config(write_job(job_dir, job(sampling={"temperature": 0.1, "top_p": 1.0})), base_dir=job_dir)
    assert report.problems == [] and report.config is not None and report.config.sampling.temperature == 0.1


@pytest.mark.parametrize(("loss", "noted"), [*((loss, True) for loss in UNEVEN_LOSSES),
                                             *((loss, False) for loss in PER_TOKEN_LOSSES)])
def test_a_loss_type_that_does_not_weigh_every_token_alike_notes_what_branching_rollouts_do(
        job_dir: Path, loss: str, noted: bool):
    report = check_config(write_job(job_dir, job(grpo={"loss_type": loss})), base_dir=job_dir)
    assert report.problems == []
    notes = [n for n in report.notes if n.startswith(f"grpo.loss_type {loss} ")]
    assert bool(notes) == noted
    assert all("harnesses that branch" in n and "dapo (TRL 1.16's default, which veri keeps)" in n for n in notes)


def test_max_staleness_refuses_what_breaks_the_off_policy_correction(job_dir: Path):
    ok = check_config(write_job(job_dir, job(max_staleness=1)), base_dir=job_dir)
    assert ok.problems == []
    bad = check_config(write_job(job_dir, job(max_staleness=2, grpo={"num_iterations": 2})), base_dir=job_dir)
    found = problems_by_place(bad)
    assert "max_staleness: 0" in found["grpo.num_iterations"]
    sleepy = check_config(write_job(job_dir, job(backend="vllm", grpo={}, max_staleness=1, vllm_sleep_mode=True)),
                          base_dir=job_dir, gpus=GpuInventory.nvidia(1))
    assert "no rollout can run meanwhile" in problems_by_place(sleepy)["vllm_sleep_mode"]
    # The same settings with the synchronous loop are not these problems.
    sync = check_config(write_job(job_dir, job(grpo={"num_iterations": 2})), base_dir=job_dir)
    assert "grpo.num_iterations" not in problems_by_place(sync)


@pytest.mark.parametrize(("value", "message"), [(-1, "greater than or equal to 0"), ("soon", "valid integer"),
                                                (1.5, "valid integer")])
def test_a_bad_max_staleness_names_the_field(job_dir: Path, value, message):
    found = problems_by_place(check_config(write_job(job_dir, job(max_staleness=value)), base_dir=job_dir))
    assert message in found["max_staleness"]


def test_eval_every_and_eval_dataset_act_only_together(job_dir: Path):
    (job_dir / "held_out.jsonl").write_text('{"prompt": "held out"}\n')
    ok = check_config(write_job(job_dir, job(eval_every=2, eval_dataset={"path": "held_out.jsonl"})), base_dir=job_dir)
    assert ok.problems == [] and ok.config.eval_dataset.path == job_dir / "held_out.jsonl"
    assert any("eval_dataset: 1 tasks x 1 every 2 steps" in note for note in ok.notes)
    found = problems_by_place(check_config(write_job(job_dir, job(eval_every=2)), base_dir=job_dir))
    assert "eval_dataset: {path: held_out.jsonl}" in found["eval_every"]
    unused = problems_by_place(check_config(write_job(job_dir, job(eval_dataset={"path": "held_out.jsonl"})),
                                            base_dir=job_dir))
    assert "never used" in unused["eval_dataset"] and "eval_every: K" in unused["eval_dataset"]
    missing = check_config(write_job(job_dir, job(eval_every=1, eval_dataset={"path": "nope.jsonl"})), base_dir=job_dir)
    assert any(problem.where.startswith("eval_dataset") for problem in missing.problems)
    negative = problems_by_place(check_config(write_job(job_dir, job(eval_every=-1)), base_dir=job_dir))
    assert "greater than or equal to 0" in negative["eval_every"]


def test_an_importance_sampling_cap_at_or_below_one_is_refused(job_dir: Path):
    found = problems_by_place(check_config(write_job(job_dir, job(importance_sampling_cap=1.0)), base_dir=job_dir))
    assert "greater than 1" in found["importance_sampling_cap"]


def test_the_trainer_checks_come_through_one_hook(job_dir: Path):
    """Core checks the schema; the reward code, `grpo:` and TRL's field names are the hook's."""
    seen: dict[str, object] = {}

    def rewards(specs: list[RewardConfig], columns: list[str] | None) -> list[Problem]:
        seen["columns"] = columns
        return [Problem("rewards[0]", "cannot load", "fix it")]

    def grpo(config: JobConfig, valid: set[str]) -> list[Problem]:
        seen["grpo"] = config.grpo
        return [Problem("grpo.x", "is wrong", "fix it")]

    hook = TrainerChecks(rewards=rewards, grpo=grpo, unknown_key=lambda key: "a trainer's fix" if key == "x" else None)
    path = write_job(job_dir, job(x=1, y=2))
    found = problems_by_place(check_config(path, base_dir=job_dir, trainer_checks=hook))
    assert found["x"] == "is not a known key | a trainer's fix"
    assert found["y"] == "is not a known key | remove it (no similar name exists)"
    assert set(found) == {"x", "y", "rewards[0]", "grpo.x"}
    assert seen == {"columns": ["expected_url", "prompt"], "grpo": job()["grpo"]}
    plain = problems_by_place(check_config(path, base_dir=job_dir))  # no hook: the schema's checks only
    assert set(plain) == {"x", "y"} and "remove it" in plain["x"]


def test_top_level_grpo_knobs_are_named_without_the_trainer(job_dir: Path):
    found = problems_by_place(check_config(write_job(job_dir, job(num_generations=8, use_vllm=True)), base_dir=job_dir))
    assert "use `rollouts_per_prompt`" in found["num_generations"]
    assert "set by `backend:`" in found["use_vllm"]


def test_hosted_tools_is_drop_or_refuse_and_reaches_the_proxy(job_dir: Path):
    from veri.tools.appliance.stack_env import stack_env

    found = problems_by_place(check_config(write_job(job_dir, job(hosted_tools="ignore")), base_dir=job_dir))
    assert "'drop' or 'refuse'" in found["hosted_tools"], found
    assert check_config(write_job(job_dir, job(hosted_tools="refuse")), base_dir=job_dir).problems == []
    assert stack_env(write_job(job_dir, job(hosted_tools="refuse")), job_dir / "state")["VERI_HOSTED_TOOLS"] == "refuse"
    assert stack_env(write_job(job_dir, job()), job_dir / "state")["VERI_HOSTED_TOOLS"] == "drop"


def test_a_job_without_backend_on_a_machine_with_no_gpu_is_refused_naming_both(job_dir: Path):
    unsaid = {key: value for key, value in job(grpo={}).items() if key != "backend"}
    no_gpu = GpuInventory(0, GpuVendor.NONE)
    found = problems_by_place(check_config(write_job(job_dir, unsaid), base_dir=job_dir, gpus=no_gpu))
    assert "`backend:` is not set" in found["backend"] and "no NVIDIA GPU" in found["backend"]
    assert "`backend: hf`" in found["backend"] and "`backend: vllm`" in found["backend"]
    with pytest.raises(LayoutError, match="`backend:` is not set"):  # the plan make train's stack-env makes
        plan_job(parse_config(unsaid, base_dir=job_dir), no_gpu)
    # said: a GPU job checked away from its box (a note), or the CPU twin; planned for GPUs: the GPU path
    said = check_config(write_job(job_dir, {**unsaid, "backend": "vllm"}), base_dir=job_dir)
    assert said.problems == [] or "backend" not in problems_by_place(said)
    assert check_config(write_job(job_dir, {**unsaid, "device": "cpu"}), base_dir=job_dir).problems == []
    assert check_config(write_job(job_dir, unsaid), base_dir=job_dir, gpus=GpuInventory.nvidia(2)).problems == []


@pytest.mark.parametrize(("grpo", "rollouts_per_prompt", "says"), [
    ({"per_device_train_batch_size": 4}, 4, "batch: 1 task per step x 4 rollouts = 4 rollouts"),
    ({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4}, 8,
     "batch: 4 tasks per step x 8 rollouts = 32 rollouts (grpo.per_device_train_batch_size 8 x"
     " grpo.gradient_accumulation_steps 4 / rollouts_per_prompt 8); 200 steps sample 800 tasks: 266.7 passes"
     " over the dataset's 3"),
    ({}, 2, "batch: 4 tasks per step x 2 rollouts = 8 rollouts (grpo.per_device_train_batch_size 8 x"),  # TRL's
    ({"per_device_train_batch_size": 4, "num_iterations": 2}, 2, "grpo.num_iterations 2: each batch is trained"
     " 2 times, new rollouts every 2 steps; 200 steps sample 200 tasks"),
])
def test_validate_says_how_many_tasks_a_step_takes(job_dir: Path, grpo, rollouts_per_prompt: int, says: str):
    config = job(grpo=grpo, rollouts_per_prompt=rollouts_per_prompt)
    report = check_config(write_job(job_dir, config), base_dir=job_dir)
    assert [note for note in report.notes if note.startswith("batch:") and says in note], report.notes


def test_no_batch_line_for_rollouts_that_are_not_whole_groups(job_dir: Path):
    report = check_config(write_job(job_dir, job(grpo={"per_device_train_batch_size": 3})), base_dir=job_dir)
    assert not [note for note in report.notes if note.startswith("batch:")]

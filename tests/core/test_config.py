"""The job config: YAML = TOML, every problem at once with its fix, GRPO pass-through against real TRL."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trl

from tests.core.jobs import job, write_job, write_model
from veri.core import grpo as grpo_rules
from veri.core.config import JobConfig, RewardConfig, SamplingConfig, parse_config, read_config_file
from veri.core.dataset import DatasetConfig
from veri.core.layout import GpuInventory
from veri.core.problems import ProblemsError
from veri.core.validation import check_config, load_config

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


@pytest.mark.parametrize("name", ["url_extract.yaml", "url_extract.toml", "url_extract_cpu.yaml"])
def test_examples_pass_trl_own_checks(name: str):
    config = parse_config(read_config_file(REPO / "config" / name), base_dir=REPO)
    knobs = config.model_copy(update={"grpo": {}}).grpo_config_kwargs()
    assert grpo_rules.check_grpo_section(config.grpo, knobs=knobs) == []


def test_a_complete_job_has_no_problems(job_dir: Path):
    report = check_config(write_job(job_dir, job()), base_dir=job_dir)
    assert report.problems == []
    assert report.config is not None and report.config.model == job_dir / "models/policy"
    assert any("3 tasks" in note for note in report.notes)


def test_every_problem_at_once_each_with_its_fix(job_dir: Path):
    config = job(
        backend="vllm",
        max_step=10,  # typo
        rollouts_per_prompt="eight",  # bad type
        dataset={"path": "data/missing.jsonl", "colum_mapping": {}},  # missing file, nested typo
        rewards=[{"file": "rewards/nope.py"}],
        vllm_tensor_parallel_size=4,
        vllm_data_parallel_size=2,
        grpo={"per_device_train_bach_size": 4, "num_generations": 4, "use_vllm": True, "logging_steps": "often"},
    )
    report = check_config(write_job(job_dir, config), base_dir=job_dir, gpus=GpuInventory.nvidia(4))
    found = problems_by_place(report)
    assert "did you mean `max_steps`" in found["max_step"]
    assert "valid integer" in found["rollouts_per_prompt"]
    assert "did you mean `column_mapping`" in found["dataset.colum_mapping"]
    assert "does not exist" in found["rewards[0].file"]
    assert "did you mean `per_device_train_batch_size`" in found["grpo.per_device_train_bach_size"]
    assert "set `rollouts_per_prompt` instead" in found["grpo.num_generations"]
    assert "set by `backend:`" in found["grpo.use_vllm"]
    assert "wrong type" in found["grpo.logging_steps"]
    assert "4 x 2 = 8 GPUs, but only 3 are free" in found["vllm_tensor_parallel_size"]
    assert report.config is None
    with pytest.raises(ProblemsError) as raised:
        load_config(write_job(job_dir, config), base_dir=job_dir, gpus=GpuInventory.nvidia(4))
    assert len(raised.value.problems) == len(report.problems) == 9


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


def test_grpo_settings_at_the_top_level_are_pointed_to_their_place(job_dir: Path):
    config = job(per_device_train_batch_size=8, num_generations=8, use_vllm=True)
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir))
    assert "move it under `grpo:`" in found["per_device_train_batch_size"]
    assert "use `rollouts_per_prompt`" in found["num_generations"]
    assert "set by `backend:`" in found["use_vllm"]


def test_trl_own_checks_run_on_the_combined_settings(job_dir: Path):
    config = job(grpo={"per_device_train_batch_size": 3})  # rollouts_per_prompt 4 does not divide 3
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir))
    assert "must be divisible by num_generations (4)" in found["grpo"]


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
    assert cpu.config is not None and cpu.config.gpu_layout().data_parallel_size == 2
    hf = problems_by_place(check_config(write_job(job_dir, job(weight_sync="nccl", device="cpu")), base_dir=job_dir))
    assert "only applies to `backend: vllm`" in hf["weight_sync"] and "only applies" in hf["device"]


def test_grpo_config_kwargs_build_a_real_grpo_config(job_dir: Path, tmp_path: Path):
    knobs = job(kl_coef=0.04, max_response_length=512, learning_rate="3e-6", sampling={"temperature": 0.7},
                chat_template_kwargs={"enable_thinking": False})
    config = load_config(write_job(job_dir, knobs), base_dir=job_dir)
    kwargs = config.grpo_config_kwargs()
    built = trl.GRPOConfig(**kwargs, output_dir=str(tmp_path / "out"))
    assert (built.num_generations, built.beta, built.max_completion_length) == (4, 0.04, 512)
    assert (built.learning_rate, built.temperature, built.max_steps) == (3e-6, 0.7, config.max_steps)
    assert built.chat_template_kwargs == {"enable_thinking": False}
    assert built.per_device_train_batch_size == 4 and built.use_vllm is False and built.use_cpu is True


def test_gpu_job_kwargs_ask_for_vllm_server_mode(tmp_path: Path):
    config = parse_config(read_config_file(REPO / "config/url_extract.yaml"), base_dir=REPO)
    kwargs = config.grpo_config_kwargs()
    assert kwargs["use_vllm"] is True and kwargs["vllm_mode"] == "server" and kwargs["loss_type"] == "dapo"
    built = trl.GRPOConfig(**{**kwargs, "use_cpu": True}, output_dir=str(tmp_path / "out"))  # no GPU here
    assert built.num_generations == 8 and built.gradient_accumulation_steps == 4


def test_lora_kwargs_build_a_peft_config(job_dir: Path):
    import peft

    config = load_config(write_job(job_dir, job(lora_rank=16)), base_dir=job_dir)
    lora = peft.LoraConfig(**config.lora_config_kwargs())
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (16, 32, 0.0)
    assert load_config(write_job(job_dir, job()), base_dir=job_dir).lora_config_kwargs() is None


def test_knob_tables_agree_with_trl_and_the_schema():
    fields = {field.name for field in dataclasses.fields(trl.GRPOConfig)}
    assert set(grpo_rules.VERI_KNOBS) <= fields
    assert set(grpo_rules.VERI_OWNED) <= fields
    assert not set(grpo_rules.VERI_KNOBS) & set(grpo_rules.VERI_OWNED)
    for knob in grpo_rules.VERI_KNOBS.values():
        section, _, name = knob.rpartition(".")
        model = JobConfig.model_fields[section].annotation if section else JobConfig
        assert name in model.model_fields, knob


@pytest.mark.parametrize("model", [JobConfig, DatasetConfig, RewardConfig, SamplingConfig])
def test_every_knob_says_what_uses_it(model):
    undocumented = [name for name, info in model.model_fields.items() if not info.description]
    assert undocumented == []


def test_vllm_with_top_p_below_one_notes_the_logprob_offset(job_dir: Path):
    nucleus = check_config(write_job(job_dir, job(backend="vllm", grpo={}, sampling={"top_p": 0.9})),
                           base_dir=job_dir, gpus=GpuInventory.nvidia(4))
    assert nucleus.problems == []
    [note] = [n for n in nucleus.notes if "top_p" in n]
    assert "0.105 nats" in note and "top_p: 1.0" in note
    plain = check_config(write_job(job_dir, job(backend="vllm", grpo={})), base_dir=job_dir,
                         gpus=GpuInventory.nvidia(4))
    assert not [n for n in plain.notes if "top_p" in n]

"""What a job means to TRL, against the installed TRL and peft: the GRPOConfig and LoraConfig kwargs
(veri.services.trainer.grpo.config) and the trainer's checks through core's hook (veri.services.trainer.grpo.trl_checks,
veri.services.trainer.validation_hook.TRAINER_CHECKS), as `veri validate` and `veri train` run them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trl

from tests.core.jobs import job, make_job_dir, write_job
from veri.core.config import JobConfig, parse_config, read_config_file
from veri.core.grpo import PASS_THROUGH, TRL_BATCH_DEFAULTS, VERI_KNOBS, VERI_OWNED, StepBatch
from veri.core.problems import ProblemsError
from veri.gpu.planner import GpuInventory
from veri.services.trainer.grpo.config import job_grpo_kwargs, knob_kwargs, lora_config_kwargs
from veri.services.trainer.grpo.trl_checks import check_grpo_section
from veri.services.trainer.validation_hook import TRAINER_CHECKS
from veri.validation.job_checks import PER_TOKEN_LOSSES, UNEVEN_LOSSES
from veri.validation.run import check_config, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return make_job_dir(tmp_path)


def problems_by_place(report) -> dict[str, str]:
    return {problem.where: f"{problem.message} | {problem.fix}" for problem in report.problems}


@pytest.mark.parametrize("name", ["url_extract.yaml", "url_extract.toml", "url_extract_cpu.yaml"])
def test_examples_pass_trl_own_checks(name: str):
    config = parse_config(read_config_file(REPO / "config" / name), base_dir=REPO)
    assert check_grpo_section(config.grpo, knobs=knob_kwargs(config)) == []


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
    report = check_config(write_job(job_dir, config), base_dir=job_dir, gpus=GpuInventory.nvidia(4),
                          trainer_checks=TRAINER_CHECKS)
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
        load_config(write_job(job_dir, config), base_dir=job_dir, gpus=GpuInventory.nvidia(4),
                    trainer_checks=TRAINER_CHECKS)
    assert len(raised.value.problems) == len(report.problems) == 9


def test_grpo_settings_at_the_top_level_are_pointed_to_their_place(job_dir: Path):
    config = job(per_device_train_batch_size=8, num_generations=8, use_vllm=True)
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir, trainer_checks=TRAINER_CHECKS))
    assert "move it under `grpo:`" in found["per_device_train_batch_size"]
    assert "use `rollouts_per_prompt`" in found["num_generations"]
    assert "set by `backend:`" in found["use_vllm"]


def test_trl_sampling_settings_the_trainer_cannot_score_are_refused_with_why(job_dir: Path):
    """TRL has top_k, min_p and repetition_penalty for its own generation; here rollouts sample through the
    proxy, and the trainer scores the untruncated distribution: refused, saying so (core/sampling.py)."""
    config = job(grpo={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir, trainer_checks=TRAINER_CHECKS))
    for key, why in (("top_k", "top k tokens"), ("min_p", "below min_p"), ("repetition_penalty", "repeated tokens")):
        assert why in found[f"grpo.{key}"] and "a job samples with `sampling.temperature` alone" in found[f"grpo.{key}"]
        assert "every importance ratio is off" in found[f"grpo.{key}"]


def test_trl_own_checks_run_on_the_combined_settings(job_dir: Path):
    config = job(grpo={"per_device_train_batch_size": 3})  # rollouts_per_prompt 4 does not divide 3
    found = problems_by_place(check_config(write_job(job_dir, config), base_dir=job_dir, trainer_checks=TRAINER_CHECKS))
    assert "must be divisible by num_generations (4)" in found["grpo"]


def test_grpo_config_kwargs_build_a_real_grpo_config(job_dir: Path, tmp_path: Path):
    knobs = job(kl_coef=0.04, max_response_length=512, learning_rate="3e-6", sampling={"temperature": 0.7},
                chat_template_kwargs={"enable_thinking": False})
    config = load_config(write_job(job_dir, knobs), base_dir=job_dir, trainer_checks=TRAINER_CHECKS)
    kwargs = job_grpo_kwargs(config)
    built = trl.GRPOConfig(**kwargs, output_dir=str(tmp_path / "out"))
    assert (built.num_generations, built.beta, built.max_completion_length) == (4, 0.04, 512)
    assert (built.learning_rate, built.temperature, built.max_steps) == (3e-6, 0.7, config.max_steps)
    assert built.chat_template_kwargs == {"enable_thinking": False}
    assert built.per_device_train_batch_size == 4 and built.use_vllm is False and built.use_cpu is True


def test_gpu_job_kwargs_ask_for_vllm_server_mode(tmp_path: Path):
    config = parse_config(read_config_file(REPO / "config/url_extract.yaml"), base_dir=REPO)
    kwargs = job_grpo_kwargs(config)
    assert kwargs["use_vllm"] is True and kwargs["vllm_mode"] == "server" and kwargs["loss_type"] == "dapo"
    built = trl.GRPOConfig(**{**kwargs, "use_cpu": True}, output_dir=str(tmp_path / "out"))  # no GPU here
    assert built.num_generations == 8 and built.gradient_accumulation_steps == 4


def test_lora_kwargs_build_a_peft_config(job_dir: Path):
    import peft

    config = load_config(write_job(job_dir, job(lora_rank=16)), base_dir=job_dir)
    lora = peft.LoraConfig(**lora_config_kwargs(config))
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (16, 32, 0.0)
    assert lora_config_kwargs(load_config(write_job(job_dir, job()), base_dir=job_dir)) is None


def test_knob_tables_agree_with_trl_and_the_schema():
    fields = {field.name for field in dataclasses.fields(trl.GRPOConfig)}
    assert set(VERI_KNOBS) <= fields
    assert set(VERI_OWNED) <= fields
    assert not set(VERI_KNOBS) & set(VERI_OWNED)
    for knob in VERI_KNOBS.values():
        section, _, name = knob.rpartition(".")
        model = JobConfig.model_fields[section].annotation if section else JobConfig
        assert name in model.model_fields, knob


def test_the_batch_veri_describes_is_the_one_trl_makes(tmp_path: Path):
    """TRL's defaults for the batch fields are StepBatch's, and a step's rollouts (TRL's generation batch, one
    process) are per_device_train_batch_size x gradient_accumulation_steps, tasks = that / num_generations."""
    defaults = {field.name: field.default for field in dataclasses.fields(trl.GRPOConfig)}
    assert {name: defaults[name] for name in TRL_BATCH_DEFAULTS} == TRL_BATCH_DEFAULTS
    assert set(PASS_THROUGH) <= set(defaults) and not set(PASS_THROUGH) & (set(VERI_KNOBS) | set(VERI_OWNED))
    for grpo, rollouts_per_prompt in (({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4}, 8),
                                      ({"per_device_train_batch_size": 6}, 3), ({}, 2)):
        batch = StepBatch.of(rollouts_per_prompt, grpo)
        built = trl.GRPOConfig(**grpo, num_generations=rollouts_per_prompt, use_cpu=True, output_dir=str(tmp_path))
        assert built.world_size == 1 and built.generation_batch_size == batch.rollouts
        assert built.generation_batch_size // built.num_generations == batch.tasks


def test_every_loss_type_of_the_installed_trl_is_noted_or_weighs_every_token_alike():
    """The loss-type note (validation/job_checks.py) covers every loss TRL's `_compute_loss` knows: those dividing by
    the batch's trained tokens (`num_items_in_batch`) need none, every other one gets its note."""
    import inspect
    import re

    source = inspect.getsource(trl.GRPOTrainer._compute_loss)
    named = {name for clause in re.findall(r"self\.loss_type (?:==|in) (\[[^\]]+\]|\"[a-z_]+\")", source)
             for name in re.findall(r"\"([a-z_]+)\"", clause)}
    assert named == {*PER_TOKEN_LOSSES, *UNEVEN_LOSSES}
    normalised_by_tokens = re.search(r"elif self\.loss_type in (\[[^\]]+\]):\n\s+# `num_items_in_batch`", source)
    assert normalised_by_tokens is not None
    assert set(re.findall(r"\"([a-z_]+)\"", normalised_by_tokens.group(1))) == set(PER_TOKEN_LOSSES)

"""bench/device_check.py — the GPU path's first contact with a GPU, in one 10-minute call.

Runs on a bare machine with one NVIDIA GPU (torch with CUDA, transformers, accelerate, peft), veri's
source tree and TRL carried in, no model download, no docker, no vLLM. It checks what a user's first GPU
run depends on most and veri has otherwise only estimated:

  nvidia-smi    the real output read by `veri doctor`'s parser (appliance.doctor.gpus) and the layout
                planner's probe (core.layout.probe_gpus), compared with what torch sees
  memory        for Qwen3 shapes (tests/core/models/*/config.json, random weights made on the device):
                one real GRPO step through veri's trainer path (VeriGRPOTrainer, veri's rows and
                loss, the job file's GRPOConfig) at a shipped job's settings (gradient checkpointing,
                completion lengths 4k and 8k, the job's batch): the planner's estimate
                (core.memory.trainer_estimate) against the measured peak, step time and tokens/s,
                and whether the planner's accept/refuse for a 24, 48, 80 and 141 GB GPU agrees with
                what fits
                  full  config/url_extract.yaml: full fine-tune, float32 weights (TRL's default)
                  lora  config/url_extract_24gb.yaml's way: LoRA (r 16 here), bfloat16 weights
  hand-off      one-GPU sleep mode: the trainer's reserved memory after a step, before and after its
                empty_cache (weights.vllm_sync.empty_trainer_cache): what vLLM could wake into
  weight sync   filesystem: write and read GB/s of the 4B shape's policy weights as safetensors
                (weights.state.write_step_weights, the file the vLLM server loads)

Runs go in order of value (the 4B job first), each result written as it lands, so a run cut short still
answers the most; past --budget-s no new run starts. Output: device_check.json and device_check.md in --out.

    python bench/device_check.py --device cpu --shapes tiny --lengths 32 --out /tmp/dc   # tests: never rots

On the GPU machine (Python 3.12, no network), with what it lacks carried as wheels (4.5 MB; the source tree
5.5 MB and build/models/tiny's tokenizer 2.2 MB travel with them):

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
        multiprocess==0.70.19 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
        typing-inspection==0.4.5                                  # here, once
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/device_check.py --out $OUT   # there
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import TrainerCallback  # noqa: E402

from veri.core.config import parse_config, read_config_file  # noqa: E402
from veri.gpu.job import training_setup  # noqa: E402
from veri.gpu.memory import GIB, PROMPT_TOKENS, ModelShape, trainer_estimate  # noqa: E402
from veri.gpu.planner import GpuLayout, PolicyDevice, WeightSync, estimate_parameters  # noqa: E402

SHAPES = {  # in order of value: the shipped job's model first
    "qwen3-4b": ROOT / "tests/core/models/qwen3-4b/config.json",
    "qwen3-8b": ROOT / "tests/core/models/qwen3-8b/config.json",
    "qwen3-1.7b": ROOT / "tests/core/models/qwen3-1.7b/config.json",
    "qwen3-0.6b": ROOT / "tests/core/models/qwen3-0.6b/config.json",
    "tiny": ROOT / "build/models/tiny/config.json",
}
GPU_SIZES_MIB = {24: 23034, 48: 46068, 80: 81559, 141: 143771}  # nvidia-smi's memory.total per marketing size
LORA_RANK = 16
GROUP = 8  # one GRPO group: the job's per_device_train_batch_size rows, one micro-batch


@dataclass
class Run:
    shape: str
    mode: str  # full | lora
    completion: int
    batch: int
    parameters: int
    estimate_gib: float
    estimate_parts: dict[str, float]
    status: str = "not run"  # ok | oom | error | skipped
    detail: str = ""
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    context_gib: float | None = None  # the CUDA context and what else torch's allocator does not count
    step_s: float | None = None  # the second step (the first makes AdamW's states)
    first_step_s: float | None = None  # model made and trainer built excluded; warm-up included
    first_step_peak_reserved_gib: float | None = None
    tokens_per_s: float | None = None
    reserved_after_step_gib: float | None = None
    reserved_after_empty_cache_gib: float | None = None
    cap_gib: float | None = None  # the GPU size the step ran as (torch's per-process memory fraction)
    allocated_after_empty_cache_gib: float | None = None
    decisions: dict[str, dict[str, bool | None]] = field(default_factory=dict)

    @property
    def measured_gib(self) -> float | None:
        """What the step needed of the GPU: the allocator's peak reservation plus the context."""
        if self.peak_reserved_gib is None:
            return None
        return self.peak_reserved_gib + (self.context_gib or 0.0)

    @property
    def ratio(self) -> float | None:
        measured = self.measured_gib
        return self.estimate_gib / measured if measured and self.status == "ok" else None


class Report:
    def __init__(self, out: Path, device: str):
        self.out, self.started = out, time.monotonic()
        self.data: dict[str, Any] = {"device": device, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                     "host": platform.node(), "problems": [], "runs": []}
        out.mkdir(parents=True, exist_ok=True)

    def problem(self, text: str) -> None:
        print(f"PROBLEM: {text}", flush=True)
        self.data["problems"].append(text)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def save(self) -> None:
        (self.out / "device_check.json").write_text(json.dumps(self.data, indent=2, default=str))
        (self.out / "device_check.md").write_text(markdown(self.data))


# --- nvidia-smi through veri's parsers ------------------------------------------------------------------


def check_nvidia_smi(report: Report) -> None:
    import torch

    from veri.gpu.planner import probe_gpus
    from veri.tools.appliance.doctor.facts import Status
    from veri.tools.appliance.doctor.gpus import QUERY, gpu_facts, read_gpus

    raw = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60)
    planner_raw = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=60)
    gpus = read_gpus() or []
    facts = gpu_facts(gpus, gpu_job=True)
    inventory = probe_gpus()
    seen = {"doctor_query_output": raw.stdout, "planner_query_output": planner_raw.stdout,
            "doctor_gpus": [asdict(gpu) for gpu in gpus],
            "doctor_facts": [{"name": f.name, "status": f.status.value, "found": f.found, "fix": f.fix} for f in facts],
            "planner": {"count": inventory.count, "vendor": str(inventory.vendor), "names": list(inventory.names),
                        "memory_gib": inventory.memory_gib}}
    report.data["nvidia_smi"] = seen
    print("nvidia-smi (doctor's query):", raw.stdout.strip())
    for fact in facts:
        print(f"  doctor: {fact.name}: {fact.status.value}: {fact.found}")
    print(f"  planner: {inventory.count} GPU(s) {list(inventory.names)}, {inventory.memory_gib} GiB each")
    for fact in facts:
        if fact.status == Status.FAIL:
            report.problem(f"veri doctor fails on this GPU: {fact.name}: {fact.found}")
    count = torch.cuda.device_count()
    if len(gpus) != count or inventory.count != count:
        report.problem(f"torch sees {count} GPU(s), doctor {len(gpus)}, the planner {inventory.count}")
    for index, gpu in enumerate(gpus[:count]):
        props = torch.cuda.get_device_properties(index)
        total_mib = props.total_memory / 2**20
        if gpu.memory_mib is None or abs(gpu.memory_mib - total_mib) > 0.02 * total_mib:
            report.problem(f"GPU {index}: doctor reads {gpu.memory_mib} MiB, torch {total_mib:.0f} MiB")
        if gpu.compute != torch.cuda.get_device_capability(index):
            report.problem(f"GPU {index}: doctor reads compute {gpu.compute}, torch"
                           f" {torch.cuda.get_device_capability(index)}")
        if gpu.name != props.name:
            report.problem(f"GPU {index}: doctor reads the name {gpu.name!r}, torch {props.name!r}")
        if not gpu.driver.split(".")[0].isdigit():
            report.problem(f"GPU {index}: doctor reads the driver {gpu.driver!r}")
    if inventory.memory_gib is None or (gpus and gpus[0].memory_mib
                                        and abs(inventory.memory_gib * 1024 - gpus[0].memory_mib) > 1):
        doctor_mib = gpus[0].memory_mib if gpus else None
        report.problem(f"the planner reads {inventory.memory_gib} GiB per GPU, doctor {doctor_mib} MiB")
    report.save()


# --- one GRPO step through veri's trainer path ----------------------------------------------------------


def job_config(mode: str, completion: int, model_dir: Path, device: str) -> Any:
    """The shipped job (config/url_extract.yaml) as parsed by veri, at this run's mode and length."""
    raw = read_config_file(ROOT / "config/url_extract.yaml")
    raw |= {"model": str(model_dir), "max_response_length": completion,
            "max_model_len": completion + PROMPT_TOKENS, "rollouts_per_prompt": GROUP}
    grpo = dict(raw.get("grpo") or {})
    grpo |= {"per_device_train_batch_size": GROUP, "gradient_accumulation_steps": 1, "save_steps": 10**6}
    if mode == "lora":
        raw["lora_rank"] = LORA_RANK
        grpo["model_init_kwargs"] = {"dtype": "bfloat16"}
    if device == "cpu":
        grpo["bf16"] = False
    raw["grpo"] = grpo
    return parse_config(raw, base_dir=ROOT)


def model_folder(shape: str, tokenizer_dir: Path, scratch: Path) -> Path:
    """config.json of the shape + the tiny model's tokenizer (the ids are random: any tokenizer does)."""
    folder = scratch / shape
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SHAPES[shape], folder / "config.json")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, folder / name)
    return folder


def random_records(tokens: int, completion: int, vocab: int, seed: int) -> list[Any]:
    """GROUP rollouts' records with rows of PROMPT_TOKENS + `completion` random ids (a tool result of 256
    environment tokens every 1024), rewards spread so the advantages are not all zero."""
    import random

    from veri.core.episodes import Episode, RolloutStatus, TrainingRow
    from veri.core.rollout_record import RewardOutcome, RolloutRecord

    rng = random.Random(seed)
    records = []
    for index in range(GROUP):
        ids = [rng.randrange(vocab) for _ in range(tokens + completion)]
        env = [0 if (position % 1024) >= 768 else 1 for position in range(completion)]
        row = TrainingRow(prompt_ids=ids[:tokens], completion_ids=ids[tokens:],
                          logprobs=[-rng.random() * 2 if e else 0.0 for e in env], env_mask=env)
        value = index / (GROUP - 1)
        records.append(RolloutRecord(rollout_id=f"r{index}", task_index=0, rollout_index=index,
                                     status=RolloutStatus.COMPLETED,
                                     episode=Episode(status=RolloutStatus.COMPLETED, row=row),
                                     reward=RewardOutcome(reward=value, per_function={"reward": value})))
    return records


def run_step(run: Run, config: Any, device: str, report: Report) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from veri.services.trainer.grpo.rewards import scored_reward
    from veri.services.trainer.grpo.rows import MaskedRow, rollout_output
    from veri.services.trainer.grpo.setup import build_trainer, grpo_config_kwargs, seat_weight_sync
    from veri.services.trainer.schedule.tasks import trl_dataset
    from veri.services.trainer.weights.sync import PushedAfterEachStep
    from veri.services.trainer.weights.vllm_sync import empty_trainer_cache

    cuda = device == "cuda"
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    records = random_records(PROMPT_TOKENS if cuda else 16, run.completion, len(tokenizer), seed=0)
    masked = MaskedRow(pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id)

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        return rollout_output(records[: len(prompts)], masked, ["reward"])

    # The one-GPU plan: the trainer and a sleeping vLLM share the GPU, weights synced through files.
    heads = AutoConfig.from_pretrained(config.model)
    plan = GpuLayout(PolicyDevice.CUDA if cuda else PolicyDevice.CPU, 1, heads.num_attention_heads,
                     heads.num_key_value_heads, 1, 1, WeightSync.FILESYSTEM, trainer_gpu=0 if cuda else None,
                     policy_gpus=(0,) if cuda else (), sleep_mode=True)
    args = grpo_config_kwargs(config, output_dir=report.out / "scratch-checkpoints", reward_weights=[1.0], plan=plan,
                              policy_url="http://unused")
    args |= {"max_steps": 2, "save_strategy": "no", "max_completion_length": run.completion, "disable_tqdm": True}
    if not cuda:
        args |= {"use_cpu": True}
    load_dtype = torch.bfloat16 if run.mode == "lora" else torch.float32  # what TRL's model_init_kwargs load
    if cuda:
        torch.cuda.empty_cache()
        base = torch.cuda.memory_reserved()
        free, total = torch.cuda.mem_get_info()
        run.context_gib = round((total - free - base) / GIB, 2)
        if run.cap_gib is not None:  # the allocator's limit: the GPU's size less the context
            torch.cuda.set_per_process_memory_fraction(min(1.0, (run.cap_gib * GIB - (total - free - base)) / total))
        torch.cuda.reset_peak_memory_stats()
    started = time.monotonic()
    trainer = model = None
    try:
        # Random weights made where they train, as TRL would load them (float32 unless the job says bf16).
        with torch.device("cuda" if cuda else "cpu"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config.model), dtype=load_dtype)
        made = sum(p.numel() for p in model.parameters())
        run.detail = f"{made:,} parameters made in {time.monotonic() - started:.0f} s"
        args.pop("model_init_kwargs", None)  # the model is made above, in that dtype
        trainer = build_trainer(config, args=args, tokenizer=tokenizer, dataset=trl_dataset([{"prompt": "task"}]),
                                rollout_func=rollout_func, reward_funcs=[scored_reward("reward")], callbacks=[],
                                model=model)
        seat_weight_sync(trainer, PushedAfterEachStep())  # TRL's importance-sampling pass, as every job runs it
        steps = SecondStep(cuda)
        trainer.add_callback(steps)
        trainer.train()
        run.step_s = round(steps.seconds, 2)
        run.first_step_s, run.first_step_peak_reserved_gib = round(steps.first_s, 2), steps.first_peak_gib
        rows_tokens = sum(len(r.episode.row.prompt_ids) + len(r.episode.row.completion_ids) for r in records)
        run.tokens_per_s = round(rows_tokens / run.step_s)
        run.status = "ok"
        if cuda:
            run.peak_allocated_gib = round(torch.cuda.max_memory_allocated() / GIB, 2)
            run.peak_reserved_gib = round(torch.cuda.max_memory_reserved() / GIB, 2)
            run.reserved_after_step_gib = round(torch.cuda.memory_reserved() / GIB, 2)
            empty_trainer_cache()
            run.reserved_after_empty_cache_gib = round(torch.cuda.memory_reserved() / GIB, 2)
            run.allocated_after_empty_cache_gib = round(torch.cuda.memory_allocated() / GIB, 2)
        if "weight_sync" not in report.data and run.shape in ("qwen3-4b", "tiny"):
            report.data["weight_sync"] = weight_sync_speed(trainer.model, run)
    except torch.OutOfMemoryError as error:
        run.status, run.detail = "oom", str(error).splitlines()[0][:300]
        if cuda:
            run.peak_allocated_gib = round(torch.cuda.max_memory_allocated() / GIB, 2)
            run.peak_reserved_gib = round(torch.cuda.max_memory_reserved() / GIB, 2)
    except Exception as error:  # noqa: BLE001 — recorded; the next run still runs
        run.status, run.detail = "error", f"{type(error).__name__}: {error}"[:600]
        report.problem(f"{run.shape} {run.mode} {run.completion}: {run.detail}")
    finally:
        del trainer, model
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(1.0)


class SecondStep(TrainerCallback):
    """The second step is the one measured: from the first step's end, with AdamW's states already made
    (the first step makes them after its backward, so its peak is not a steady step's)."""

    def __init__(self, cuda: bool):
        self.cuda, self.began = cuda, time.monotonic()
        self.marks: list[float] = []
        self.first_peak_gib: float | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        self.marks.append(time.monotonic())
        if len(self.marks) == 1 and self.cuda:
            self.first_peak_gib = round(torch.cuda.max_memory_reserved() / GIB, 2)
            torch.cuda.reset_peak_memory_stats()

    @property
    def first_s(self) -> float:
        return self.marks[0] - self.began

    @property
    def seconds(self) -> float:
        return self.marks[-1] - self.marks[-2]


def weight_sync_speed(model: Any, run: Run) -> dict[str, Any]:
    """The filesystem sync's file, as the trainer writes it (policy_state_dict: LoRA merged) and read back."""
    from safetensors.torch import load_file

    from veri.services.policy.weight_files import WEIGHTS_FILE, write_step_weights

    folder = Path(tempfile.mkdtemp(prefix="veri-weights-"))
    try:
        began = time.monotonic()
        written = write_step_weights(folder, 1, model)
        write_s = time.monotonic() - began
        size = (written / WEIGHTS_FILE).stat().st_size
        dropped = _drop_page_cache() if run.shape != "tiny" else False  # never the test machine's cache
        began = time.monotonic()
        tensors = load_file(str(written / WEIGHTS_FILE))
        read_s = time.monotonic() - began
        del tensors
        return {"shape": run.shape, "mode": run.mode, "bytes": size, "write_s": round(write_s, 2),
                "read_s": round(read_s, 2), "write_gb_s": round(size / write_s / 1e9, 2),
                "read_gb_s": round(size / read_s / 1e9, 2), "page_cache_dropped": dropped}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _drop_page_cache() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def smallest_accepted(estimate_gib: float) -> int | None:
    """The smallest of the GPU sizes the planner accepts for the trainer alone on GPU 0 (None: none)."""
    return next((size for size, mib in GPU_SIZES_MIB.items() if estimate_gib <= mib / 1024), None)


def decide(run: Run) -> None:
    """The planner's accept/refuse per GPU size against what fits. The step ran capped at the smallest size
    the planner accepts (`cap_gib`): done there, it fits that size and every larger one; out of memory
    there, the planner accepted what does not fit. A size it refuses is known not to fit when the peak
    allocated already exceeds it; otherwise that refusal is unchecked (-)."""
    for size, mib in GPU_SIZES_MIB.items():
        gib = mib / 1024
        accepts = run.estimate_gib <= gib
        fits: bool | None = None
        if run.peak_allocated_gib is not None and run.peak_allocated_gib + (run.context_gib or 0) > gib:
            fits = False
        elif run.cap_gib is not None and run.status == "ok" and gib >= run.cap_gib - 0.05:
            fits = True
        elif run.cap_gib is not None and run.status == "oom" and abs(gib - run.cap_gib) < 0.05:
            fits = False
        run.decisions[str(size)] = {"planner_accepts": accepts, "fits": fits}


# --- the report --------------------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    lines = [f"# veri device check — {data['date']}, {data.get('gpu', data['device'])}", ""]
    smi = data.get("nvidia_smi")
    if smi:
        lines += ["nvidia-smi through veri's parsers: " + "; ".join(
            f"{f['name']} {f['status']} ({f['found']})" for f in smi["doctor_facts"])
            + f"; planner: {smi['planner']['count']} x {smi['planner']['memory_gib']:.1f} GiB", ""]
    lines += ["| shape | mode | completion | batch | planner estimate GiB | measured GiB (reserved + context) |"
              " peak allocated GiB | estimate / measured | step s | tokens/s | 24 / 48 / 80 / 141 GB: planner vs fits |"
              " after step / after empty_cache GiB | run as GiB | status |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        decisions = " ".join(
            f"{size}:{'A' if d['planner_accepts'] else 'R'}/{'-' if d['fits'] is None else ('F' if d['fits'] else 'X')}"
            + ("" if d["fits"] is None or d["fits"] == d["planner_accepts"] else "!")
            for size, d in run["decisions"].items())
        measured = run["measured_gib"]
        lines.append(
            f"| {run['shape']} | {run['mode']} | {run['completion']} | {run['batch']} | {run['estimate_gib']:.1f} |"
            f" {_num(measured)} | {_num(run['peak_allocated_gib'])} |"
            f" {_num(run['estimate_gib'] / measured if measured and run['status'] == 'ok' else None, 2)} |"
            f" {_num(run['step_s'])} | {_num(run['tokens_per_s'], 0)} | {decisions} |"
            f" {_num(run['reserved_after_step_gib'])} / {_num(run['reserved_after_empty_cache_gib'])} |"
            f" {_num(run['cap_gib'])} |"
            f" {run['status']}{': ' + run['detail'][:80] if run['status'] != 'ok' else ''} |")
    lines += ["", "A = the planner accepts, R = refuses; F = fits, X = does not, - = not checked; ! = they disagree."
              " Each step ran capped at the smallest GPU the planner accepts (run as GiB)."]
    sync = data.get("weight_sync")  # None: skipped
    if sync:
        lines += ["", f"Filesystem weight sync ({sync['shape']} {sync['mode']}, {sync['bytes'] / 1e9:.1f} GB):"
                      f" write {sync['write_gb_s']} GB/s, read {sync['read_gb_s']} GB/s"
                      f" (page cache dropped before the read: {sync['page_cache_dropped']})"]
    if data["problems"]:
        lines += ["", "Problems:", *(f"- {p}" for p in data["problems"])]
    return "\n".join(lines) + "\n"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shapes", default="qwen3-4b,qwen3-8b,qwen3-1.7b,qwen3-0.6b")
    parser.add_argument("--modes", default="full,lora")
    parser.add_argument("--lengths", default="4096,8192", help="completion lengths, in order")
    parser.add_argument("--tokenizer", type=Path, default=ROOT / "build/models/tiny")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "build/device-check")))
    parser.add_argument("--no-weight-sync", action="store_true", help="skip the filesystem sync's GB/s")
    parser.add_argument("--budget-s", type=float, default=480, help="no run starts after this many seconds")
    args = parser.parse_args()
    import torch

    report = Report(args.out, args.device)
    if args.no_weight_sync:
        report.data["weight_sync"] = None
    cuda = args.device == "cuda"
    memory_gib = None
    if cuda:
        if not torch.cuda.is_available():
            sys.exit("device_check: torch sees no CUDA device (--device cpu for the CPU mode)")
        props = torch.cuda.get_device_properties(0)
        memory_gib = props.total_memory / GIB
        report.data["gpu"] = f"{props.name}, {memory_gib:.1f} GiB, torch {torch.__version__}"
        check_nvidia_smi(report)
    import transformers
    import trl

    report.data["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                               "trl": trl.__version__, "python": platform.python_version()}
    print(f"device check on {report.data.get('gpu', 'cpu')}: {report.data['versions']}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="veri-device-check-"))
    plan = [(length, shape, mode) for shape in args.shapes.split(",")
            for length in map(int, args.lengths.split(",")) for mode in args.modes.split(",")]
    for length, shape, mode in plan:
        folder = model_folder(shape, args.tokenizer, scratch)
        config = job_config(mode, length, folder, args.device)
        shape_config = json.loads(SHAPES[shape].read_text())
        model_shape = ModelShape.from_config(shape_config)
        assert model_shape is not None
        setup = training_setup(config)
        parameters = estimate_parameters(shape_config) or 0
        estimate = trainer_estimate(parameters, model_shape, setup)
        run = Run(shape, mode, length, setup.batch_size, parameters, round(estimate.total_gib, 2),
                  {name: round(gib, 2) for name, gib in estimate.parts})
        if report.elapsed() > args.budget_s:
            run.status, run.detail = "skipped", f"past the {args.budget_s:.0f} s budget"
        elif memory_gib is not None and estimate.total_gib > 1.3 * memory_gib:
            run.status, run.detail = "skipped", f"the planner's estimate is 1.3x this GPU's {memory_gib:.0f} GiB"
        else:
            print(f"-- {shape} {mode} completion {length} batch {setup.batch_size}:"
                  f" planner {estimate.text()}", flush=True)
            if cuda and memory_gib is not None:  # run as if on the smallest GPU the planner accepts
                size = smallest_accepted(estimate.total_gib)
                run.cap_gib = min(GPU_SIZES_MIB[size] / 1024, memory_gib) if size else memory_gib
            run_step(run, config, args.device, report)
        decide(run)
        print(f"   {run.status} {run.detail} peak reserved {run.peak_reserved_gib} allocated {run.peak_allocated_gib}"
              f" context {run.context_gib} step {run.step_s} s ratio {run.ratio}", flush=True)
        report.data["runs"].append({**asdict(run), "measured_gib": run.measured_gib, "ratio": run.ratio})
        report.save()
    shutil.rmtree(scratch, ignore_errors=True)
    print(markdown(report.data))
    return 1 if report.data["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Traces reused: a job archive's trained rows as a supervised fine-tuning dataset, and TRL's SFTTrainer on it.

    rows.py     `veri export sft JOB`: the archive's trained rows (exact ids, the environment mask, the
                messages, provenance) as JSONL lines TRL's SFTTrainer takes pre-tokenized
    sft.py      `veri sft CONFIG`: the config (pydantic, extra=forbid) and the SFTTrainer run on those lines
    cli.py      both commands (import-light)

docs/exporting.md is the user's page.
"""

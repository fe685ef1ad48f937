"""TRL's private API stays in one module (veri.services.trainer.grpo.trl_internals), and the installed TRL
still has it the way that module recorded it: an upgrade that changes a private signature fails here,
naming the method and both TRL versions, instead of deep in a training step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from veri.services.trainer.grpo import trl_internals

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / "services/veri/services/trainer/grpo/trl_internals.py"
# A TRL private name, a TRL-internal trainer attribute, or an import from TRL's private modules.
PRIVATE_USE = re.compile(
    r"\._(metrics|last_loaded_step|tokenizer|get_per_token_logps_and_entropies|generate_and_score_completions"
    r"|compute_loss)\b|\.(vllm_generation|use_vllm|vllm_importance_sampling_(mode|clip_min|clip_max))\b"
    r"|^\s*(from|import) trl\.", re.MULTILINE)


def test_the_installed_trl_has_the_private_signatures_veri_was_written_against():
    drift = trl_internals.signature_drift()
    assert not drift, "TRL's private API changed; update trl_internals.py and re-record:\n" + "\n".join(drift)


def test_the_installed_trl_still_sets_the_attributes_veri_reads():
    import trl

    missing = trl_internals.missing_attributes()
    assert not missing, (f"TRL {trl.__version__}'s GRPOTrainer no longer sets {missing} (veri was written against "
                         f"TRL {trl_internals.RECORDED_TRL}): update trl_internals.py")


def test_a_changed_signature_is_named_with_the_method_and_both_versions(monkeypatch):
    import trl

    name = "GRPOTrainer._generate_and_score_completions"
    monkeypatch.setitem(trl_internals.RECORDED, name, "(self, inputs, extra)")
    (line,) = trl_internals.signature_drift()
    assert line.startswith(f"{name}: TRL {trl.__version__} has (self, inputs)")
    assert f"TRL {trl_internals.RECORDED_TRL}'s (self, inputs, extra)" in line


def test_a_method_trl_removed_is_named():
    from trl import GRPOTrainer

    name = "GRPOTrainer._score_everything"
    assert not hasattr(GRPOTrainer, "_score_everything")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(trl_internals.RECORDED, name, "(self)")
        assert any(line.startswith(f"{name}: TRL") and "missing" in line for line in trl_internals.signature_drift())


def test_every_recorded_internal_is_explained():
    for internal in trl_internals.INTERNALS:
        assert internal.why and internal.upstream, internal.name
    explained = " ".join(internal.name for internal in trl_internals.INTERNALS)
    for name in [*trl_internals.RECORDED, *trl_internals.ATTRIBUTES]:
        assert name.split(".")[-1] in explained, f"{name} is recorded but INTERNALS does not say why veri needs it"


def test_no_other_module_of_veri_or_bench_uses_trl_internals():
    offenders = []
    for path in [*(REPO / "services").rglob("*.py"), *(REPO / "bench").rglob("*.py")]:
        if path == HOME:
            continue
        code = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
        code = re.sub(r'"""[\s\S]*?"""', "", code)  # docstrings may name what they explain
        offenders += [f"{path.relative_to(REPO)}: {hit.group(0).strip()}" for hit in PRIVATE_USE.finditer(code)]
    assert not offenders, "TRL's private API outside trl_internals.py (go through it):\n" + "\n".join(offenders)


def test_the_check_finds_a_private_use():
    assert PRIVATE_USE.search("    trainer._metrics[mode].append(1.0)")
    assert PRIVATE_USE.search("from trl.trainer.utils import pad")
    assert PRIVATE_USE.search("trainer.vllm_generation = sync")
    assert not PRIVATE_USE.search("from trl import GRPOConfig")
    assert not PRIVATE_USE.search('{"vllm_importance_sampling_mode": "token_truncate"}')

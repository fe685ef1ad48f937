"""veri's vLLM worker extension re-ties what vLLM's layerwise reload untied, and says which process it is
(veri.services.policy.vllm.worker).

The real thing runs in `tests/stack/test_train_vllm.py` (vLLM's CPU build); here the tie logic alone,
on a module shaped like vLLM's tied lm_head: the head's weight *is* the embedding's, and the head keeps
derived state (vLLM's CPU build: a prepared GEMM) that its quant method rebuilds after loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from veri.core.policy_api import ServerProcess
from veri.services.policy.vllm.worker import shared_parameters, tie_again

SERVICES = Path(__file__).resolve().parents[2] / "services"


class PrepareGemm:
    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        layer.prepared = layer.weight.detach().clone()


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant_method = PrepareGemm()


class TiedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(8, 4)
        self.body = torch.nn.Linear(4, 4)
        self.lm_head = Head()
        self.lm_head.weight = self.embed_tokens.weight
        self.lm_head.quant_method.process_weights_after_loading(self.lm_head)


def test_a_reloaded_embedding_is_the_head_again_with_its_state_rebuilt():
    model = TiedModel()
    ties = shared_parameters(model)
    assert ties == [["embed_tokens.weight", "lm_head.weight"]]
    # what vLLM's layerwise reload does: the loaded layer gets a fresh parameter; the head keeps the old
    model.embed_tokens.weight = torch.nn.Parameter(torch.full((8, 4), 2.0))
    assert model.lm_head.weight is not model.embed_tokens.weight
    assert tie_again(model, ties) == ["lm_head.weight"]
    assert model.lm_head.weight is model.embed_tokens.weight
    assert torch.equal(model.lm_head.prepared, torch.full((8, 4), 2.0))


def test_untied_models_have_nothing_to_tie():
    assert shared_parameters(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))) == []


@pytest.mark.needs("process")
def test_each_worker_process_says_which_process_it_is_and_a_new_process_is_another():
    """`veri_server_process`: what the trainer notes when it gives a server its weights and asks again before
    scoring (services/trainer/weights/served.py). A restarted server's workers are new processes: another id."""
    code = ("import json; from veri.services.policy.vllm.worker import WeightReloadExtension as W;"
            " print(json.dumps([W().veri_server_process(), W().veri_server_process()]))")
    answers = [json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                         env={**os.environ, "PYTHONPATH": str(SERVICES)}).stdout)
               for _ in range(2)]
    first, second = ([ServerProcess.model_validate(one) for one in answer] for answer in answers)
    assert first[0] == first[1] and second[0] == second[1]  # one process, one answer
    assert first[0].id != second[0].id and first[0].started_at <= second[0].started_at

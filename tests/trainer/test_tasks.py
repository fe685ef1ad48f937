"""TRL's batch of task keys back to GRPO groups."""

from __future__ import annotations

import pytest

from veri.services.trainer.schedule.tasks import TaskGroup, task_groups, task_key, trl_dataset


def test_runs_of_equal_keys_are_groups_in_order():
    prompts = [task_key(i) for i in (3, 3, 0, 0, 3, 3)]
    assert task_groups(prompts, 2) == [TaskGroup(3, 2, 0), TaskGroup(0, 2, 0), TaskGroup(3, 2, 2)]


def test_a_batch_that_is_not_grouped_is_refused():
    with pytest.raises(ValueError, match="mixes tasks"):
        task_groups([task_key(0), task_key(1)], 2)
    with pytest.raises(ValueError, match="not a multiple"):
        task_groups([task_key(0)] * 3, 2)
    with pytest.raises(ValueError, match="not a veri task key"):
        task_groups(["What is 2+2?", "What is 2+2?"], 2)


def test_the_dataset_holds_one_key_per_row():
    assert trl_dataset([{"prompt": "a"}, {"prompt": "b"}])["prompt"] == [task_key(0), task_key(1)]

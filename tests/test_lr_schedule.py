"""The learning-rate schedules of `distsgd.lr_schedule` other than STL-SGD's stagewise one
(test_stl_sgd): the step schedule and the multistep schedule with given milestones (LIEC-SGD's
authors: x0.1 at epoch 80 of 120), their stages, the milestones' validation and command line."""
from __future__ import annotations

import pytest

from distsgd.cli import build_parser
from distsgd.training.commands import config_from_args
from distsgd.training.config import Config
from distsgd.errors import ConfigError
from distsgd.lr_schedule import lr_at, milestones_of, stage_at


def test_multistep_decays_by_a_tenth_at_each_milestone():
    c = Config(lr=0.1, steps=120, schedule="multistep", milestones=[80])
    assert [lr_at(c, t) for t in (0, 79)] == [0.1, 0.1]
    assert [lr_at(c, t) for t in (80, 119)] == pytest.approx([0.01, 0.01])
    two = Config(lr=1.0, steps=200, schedule="multistep", milestones=[80, 160])
    assert [stage_at(two, t) for t in (0, 79, 80, 159, 160, 199)] == [0, 0, 1, 1, 2, 2]
    assert lr_at(two, 160) == pytest.approx(0.01)


def test_the_step_schedule_is_multistep_at_half_and_three_quarters():
    step = Config(lr=1.0, steps=100, schedule="step")
    multi = Config(lr=1.0, steps=100, schedule="multistep", milestones=[50, 75])
    assert milestones_of(step) == [50, 75]
    assert [lr_at(step, t) for t in range(100)] == [lr_at(multi, t) for t in range(100)]


def test_multistep_after_warm_up_and_with_a_milestone_past_the_run():
    c = Config(lr=0.1, steps=10, schedule="multistep", milestones=[6, 31200], warmup_steps=4)
    assert [lr_at(c, t) for t in (0, 3)] == pytest.approx([0.025, 0.1])
    assert [stage_at(c, t) for t in (4, 5, 6, 9)] == [0, 0, 1, 1]
    Config(steps=2, schedule="multistep", milestones=[31200]).validate()   # a dry run keeps the milestones


@pytest.mark.parametrize("schedule,milestones", [
    ("multistep", []),
    ("multistep", [0]),
    ("multistep", [80, 40]),
    ("multistep", [80, 80]),
    ("multistep", [80.0]),
    ("multistep", [True]),
    ("multistep", 80),
    ("step", [80]),
    ("constant", [80]),
])
def test_bad_milestones_name_the_field(schedule, milestones):
    with pytest.raises(ConfigError) as err:
        Config(steps=100, schedule=schedule, milestones=milestones).validate()
    assert err.value.field == "milestones"


def test_command_line_takes_the_milestones():
    args = build_parser().parse_args(["train", "--schedule", "multistep", "--milestones", "30", "60"])
    config = config_from_args(args)
    assert (config.schedule, config.milestones) == ("multistep", [30, 60])
    assert config_from_args(build_parser().parse_args(["train"])).milestones == []

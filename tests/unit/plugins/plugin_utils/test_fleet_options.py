"""The rollout's options (plugin_utils/_options: FLEET_OPTIONS): every value refused with its name,
what was given and what is allowed; the good ones converted."""

from __future__ import annotations

import pytest

from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import (
    FLEET_OPTIONS,
    FLOORS,
    Step,
    check_fleet_values,
    needed,
    parse_batch_size,
    parse_share,
)


@pytest.mark.parametrize(
    ("value", "steps"),
    [
        (1, [Step(1)]),
        ("3", [Step(3)]),
        ("25%", [Step(0, 25.0)]),
        ([1, 5, "25%"], [Step(1), Step(5), Step(0, 25.0)]),
        ("1, 5, 25%", [Step(1), Step(5), Step(0, 25.0)]),
        ("[1, 5, '25%']", [Step(1), Step(5), Step(0, 25.0)]),
        (2.0, [Step(2)]),
    ],
)
def test_a_batch_size_is_a_number_a_percent_or_a_ramp(value: object, steps: list[Step]) -> None:
    assert parse_batch_size(value) == (steps, None)


@pytest.mark.parametrize("value", ["150%", [0], "abc", 0, -2, True, [], "", "0%", 2.5, None, {"a": 1}, [1, "x"]])
def test_a_bad_batch_size_is_refused_with_its_value_and_what_is_allowed(value: object) -> None:
    steps, problem = parse_batch_size(value)
    assert steps == [] and problem is not None
    assert problem.startswith("sglang_batch_size must be a whole number >= 1, a percent")
    assert "ramp" in problem and "got " in problem


def test_a_bad_ramp_item_is_named() -> None:
    _steps, problem = parse_batch_size([1, "x", "200%"])
    assert "item #2 is 'x'" in str(problem) and "item #3 is '200%'" in str(problem)


@pytest.mark.parametrize(("value", "total", "count"), [(0, 8, 0), ("3", 8, 3), ("75%", 8, 6), ("75%", 3, 3), ("50%", 3, 2), ("0%", 3, 0), ("100%", 5, 5)])
def test_a_floor_is_a_count_or_a_percent_rounded_up(value: object, total: int, count: int) -> None:
    share, problem = parse_share(value, "sglang_min_serving")
    assert problem is None and share is not None
    assert needed(share, total) == count


@pytest.mark.parametrize("value", ["101%", -1, "x", None, True, [1], "%"])
def test_a_bad_floor_is_refused(value: object) -> None:
    share, problem = parse_share(value, "sglang_min_serving")
    assert share is None and str(problem).startswith("sglang_min_serving must be a whole number >= 0 or a percent")


def test_the_defaults_are_today_s_behaviour() -> None:
    check = check_fleet_values({})
    assert check.ok
    assert check.values == {"batch_size": ["1"], "max_fail_percentage": 0, "min_serving": "0", "capacity_timeout": 600, "batch_pause": 0}


def test_every_bad_option_is_reported_at_once() -> None:
    check = check_fleet_values({"batch_size": "150%", "min_serving": "x", "max_fail_percentage": 101, "capacity_timeout": 0, "batch_pause": -1})
    assert len(check.problems) == 5
    text = " ".join(check.problems)
    for name in ("sglang_batch_size", "sglang_min_serving", "sglang_max_fail_percentage", "sglang_capacity_timeout", "sglang_batch_pause"):
        assert name in text


def test_survey_text_is_converted() -> None:
    check = check_fleet_values({"batch_size": "1, 2", "min_serving": "50%", "max_fail_percentage": "34", "capacity_timeout": "30", "batch_pause": "5"})
    assert check.ok
    assert check.values == {"batch_size": ["1", "2"], "max_fail_percentage": 34, "min_serving": "50%", "capacity_timeout": 30, "batch_pause": 5}


def test_every_number_of_the_rollout_has_a_floor() -> None:
    for name, option in FLEET_OPTIONS.items():
        if option["type"] in ("int", "float"):
            assert name in FLOORS, f"sglang_{name} takes a number but has no floor in FLOORS"

# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The phase runtime: what every phase action of a rollout does around its own steps, written once.

A phase action declares its arguments (``ARGUMENT_SPEC``: what the role passes it, among them the
``context`` the phase before returned) and implements ``run_phase``; the base checks the arguments,
gives the phase its steps (``Steps``: the host's calls and commands, each named and kept), removes
what the phase left on the host whatever happens, and shapes the result (the steps taken, the
modules' warnings). The run record is advanced by one writer, ``advance_record``.

Private to the collection; may change at any time. Controller side.
"""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase

from ansible_collections.inferops.runbooks.plugins.plugin_utils._phase import Result, Steps

RECORD_MODULE = "inferops.runbooks.run_record"


class PhaseAction(ActionBase):
    """The base of the rollout's phase actions (prepare, restart, settle, precheck)."""

    TRANSFERS_FILES = False
    ARGUMENT_SPEC: t.ClassVar[dict[str, t.Any]] = {}

    def __init_subclass__(cls, **kwargs: t.Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._VALID_ARGS = frozenset(cls.ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> Result:
        task_vars = task_vars or {}
        result: Result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        steps = self.make_steps(task_vars)
        try:
            result.update(self.run_phase(steps, dict(args), task_vars))
        finally:
            steps.close()
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.setdefault("steps", steps.done)
        if steps.warnings:
            result.setdefault("warnings", steps.warnings)
        return result

    def make_steps(self, task_vars: dict[str, t.Any]) -> Steps:
        """The phase's way to the host (a unit test gives a stand-in that answers from a script)."""
        return Steps(self, task_vars)

    def run_phase(self, steps: Steps, args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> Result:
        raise NotImplementedError


def advance_record(steps: Steps, stage: str, name: str, unit: str, run_id: str, step: str, updates: t.Mapping[str, t.Any] | None = None) -> Result:
    """The run record on the host advanced to ``step`` of this run, before the step is taken (the one
    writer of every phase); StepFailed when it cannot be written."""
    args = {"unit": unit, "run_id": run_id, "step": step, **({"updates": dict(updates)} if updates else {})}
    return steps.module(stage, name, RECORD_MODULE, args)


def optional_mapping(value: t.Any) -> dict[str, t.Any]:
    """An argument the role passes as a mapping or as nothing (an empty mapping)."""
    return dict(value) if isinstance(value, t.Mapping) else {}

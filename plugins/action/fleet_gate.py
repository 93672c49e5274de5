# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of inferops.runbooks.fleet_gate: the rollout's options checked (plan), the serving
floor before a batch leaves (floor), the bake of a batch's host (bake), and the fleet gate and the
failure tolerance after a batch (after). The decisions are ``plugin_utils/_fleet``'s; what is seen
here is the router's worker list (``plugin_utils/_router``), one generation sent from the controller
to each deployment (and to the baked host after each look), and the collection's probe
(``service_probe``) on the baked host."""

from __future__ import annotations

import json
import time
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.inferops.runbooks.plugins.action.check_options import fleet_problems
from ansible_collections.inferops.runbooks.plugins.plugin_utils import _fleet, _run_results
from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import (
    FLEET_OPTIONS,
    FLEET_PREFIX,
    check_fleet_values,
    convert,
    needed,
    parse_share,
)
from ansible_collections.inferops.runbooks.plugins.plugin_utils._plain import plain
from ansible_collections.inferops.runbooks.plugins.plugin_utils._role_options import ROLE_SPECS
from ansible_collections.inferops.runbooks.plugins.plugin_utils._rollout import generated
from ansible_collections.inferops.runbooks.plugins.plugin_utils._router import Router, RouterError

display = Display()

ARGUMENT_SPEC: dict[str, t.Any] = {
    "phase": {"type": "str", "required": True, "choices": ["plan", "floor", "bake", "after"]},
    "fleet": {"type": "dict", "default": {}},
    "rollout": {"type": "dict", "default": {}},
}
ROLE = "sglang_restart"
PROMPT = "The capital of France is"
LOOK_EVERY = 5.0
BAKE_LOOK_EVERY = 10.0
BAKE_EVIDENCE_WAIT = 2.0
GENERATION_TIMEOUT = 30
# the role variables a deployment's look needs (of its node 0)
LOOK_OPTIONS = ("port", "api_key", "smoke_url", "smoke_model", "router_url", "router_api_key", "worker_url", "router_timeout")
BAKE_OPTIONS = ("unit", "engine", "extra_rules", "disabled_rules", "health_url", "health_timeout")

Looks = dict[str, t.Optional[str]]


def failed_deployments(deployments: t.Mapping[str, list[str]]) -> dict[str, str]:
    """The play's deployments that failed so far (a host's report's verdict, or its bake), as their
    settle phase and their bake kept them in this run (``_run_results``: after every batch, the whole
    play's hosts read without composing their variables)."""
    hosts = [host for members in deployments.values() for host in members]
    verdicts, bakes = _run_results.read(hosts, _run_results.VERDICT), _run_results.read(hosts, _run_results.BAKE)
    failed: dict[str, str] = {}
    for name, members in deployments.items():
        for host in members:
            report, bake = verdicts.get(host) or {}, bakes.get(host) or {}
            if report.get("verdict") == "fail":
                failed[name] = str(report.get("reason") or "fail")
            elif bake.get("verdict") == "fail":
                failed[name] = f"bake_failed: {bake.get('msg')}"
    return failed


class ActionModule(ActionBase):
    """The rollout's fleet gates; see the module docs."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        self.task_vars = task_vars or {}
        result: dict[str, t.Any] = super().run(tmp, self.task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        phase = args["phase"]
        if phase == "plan":
            result.update(self._plan())
            return result
        fleet, rollout = plain(args["fleet"]), plain(args["rollout"])
        handler = {"floor": self._floor, "bake": self._bake, "after": self._after}[phase]
        result.update(handler(fleet, rollout))
        return result

    # -- plan: the rollout's options, checked before anything ------------------------------------

    def _plan(self) -> dict[str, t.Any]:
        def lookup(name: str) -> t.Any:
            return self._templar.template(self.task_vars[name])

        problems = fleet_problems(lookup, self.task_vars.__contains__)
        if problems:
            return {
                "failed": True,
                "reason": "invalid_options",
                "problems": problems,
                "msg": "Refusing the rollout, nothing was touched: " + "; ".join(problems),
            }
        given = {name: plain(lookup(f"{FLEET_PREFIX}{name}")) for name in FLEET_OPTIONS if f"{FLEET_PREFIX}{name}" in self.task_vars}
        values = check_fleet_values(given).values
        return {"changed": False, "fleet": values, "msg": f"the rollout's options: {json.dumps(values)}"}

    # -- the deployments and what the controller sees of them ------------------------------------

    def _deployments(self, rollout: t.Mapping[str, t.Any]) -> dict[str, list[str]]:
        members = rollout.get("members") or {}
        return {str(name): [str(host) for host in hosts] for name, hosts in members.items()}

    def _options_of(self, host: str, names: t.Sequence[str]) -> dict[str, t.Any]:
        """A host's role variables, converted (a value that cannot be is a problem for check_options; its default is used here)."""
        variables = (self.task_vars.get("hostvars") or {}).get(host) or {}
        values: dict[str, t.Any] = {}
        for name in names:
            option = ROLE_SPECS[ROLE][name]
            try:
                raw = plain(variables[f"{ROLE}_{name}"]) if f"{ROLE}_{name}" in variables else None
            except AnsibleError:
                raw = None
            value, problem = convert(name, raw, option)
            values[name] = option.get("default") if problem else value
        values["address"] = str(variables.get("ansible_host") or host) if hasattr(variables, "get") else host
        return values

    def _generate(self, url: str, options: t.Mapping[str, t.Any], timeout: float = GENERATION_TIMEOUT) -> str | None:
        """One generation from the controller: None when it answers a token, otherwise why not (never with the key)."""
        headers = {"Content-Type": "application/json"}
        if options.get("api_key"):
            headers["Authorization"] = f"Bearer {options['api_key']}"
        body = {"model": options.get("smoke_model") or "default", "prompt": PROMPT, "max_tokens": 1, "temperature": 0}
        try:
            answer = open_url(url, data=json.dumps(body), headers=headers, method="POST", timeout=timeout, validate_certs=False)
            status, payload = answer.getcode(), json.loads(answer.read() or b"null")
        except Exception as exc:  # any failure of the request: the deployment does not serve
            status, payload = getattr(exc, "code", None), None
            if status is None:
                return f"no generation from {url} ({type(exc).__name__})"
        return None if generated({"status": status, "json": payload}) else f"no generation from {url} (status {status})"

    def _look(self, deployments: t.Mapping[str, list[str]], names: t.Sequence[str]) -> Looks:
        """Each deployment of ``names``: None when it serves (listed healthy by its router, if any, and one generation), or why not."""
        listings: dict[str, t.Any] = {}
        looks: Looks = {}
        for name in names:
            options = self._options_of(deployments[name][0], LOOK_OPTIONS)
            worker = self._worker(options)
            if worker is not None:
                router = str(options["router_url"])
                if router not in listings:
                    listings[router] = self._listing(router, options)
                if isinstance(listings[router], str):
                    looks[name] = listings[router]
                    continue
                state = _fleet.worker_state(listings[router], worker)
                if state is not None:
                    looks[name] = state
                    continue
            looks[name] = self._generate(_fleet.generation_url(str(options["smoke_url"]), worker, str(options["address"])), options)
        return looks

    @staticmethod
    def _worker(options: t.Mapping[str, t.Any]) -> str | None:
        """The host's worker URL as its router lists it; None without a router."""
        if not options.get("router_url"):
            return None
        return str(options.get("worker_url") or f"http://{options['address']}:{options['port']}")

    def _listing(self, router: str, options: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]] | str:
        try:
            return Router(router, options.get("router_api_key") or None, float(options.get("router_timeout") or 30)).workers()
        except RouterError as exc:
            return f"the router cannot be read: {exc}"

    # -- floor: before a batch leaves -------------------------------------------------------------

    def _batch(self, deployments: t.Mapping[str, list[str]]) -> list[str]:
        batch = {str(host) for host in self.task_vars.get("ansible_play_batch") or []}
        return [name for name, hosts in deployments.items() if batch & set(hosts)]

    def _floor(self, fleet: t.Mapping[str, t.Any], rollout: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        deployments = self._deployments(rollout)
        share, _problem = parse_share(fleet.get("min_serving", 0), f"{FLEET_PREFIX}min_serving")
        need = needed(share, len(deployments)) if share else 0
        leaving = self._batch(deployments)
        if need <= 0:
            return {"changed": False, "msg": "no serving floor (sglang_min_serving is 0)"}
        others = [name for name in deployments if name not in leaving]
        deadline = time.monotonic() + float(fleet.get("capacity_timeout") or 0)
        started = time.monotonic()
        while True:
            check = _fleet.judge_floor(list(deployments), self._look(deployments, others), leaving, need)
            if check.met or not check.reachable or self._play_context.check_mode:
                break
            if time.monotonic() >= deadline:
                break
            display.display(f"fleet gate: waiting for the serving floor ({deadline - time.monotonic():.0f} s left): {check.line()}")
            time.sleep(min(LOOK_EVERY, max(deadline - time.monotonic(), 0.1)))
        display.display(f"fleet gate: {check.line()}")
        floor = {"needed": need, "serving": list(check.serving), "not_serving": check.not_serving, "leaving": list(leaving)}
        if check.met or self._play_context.check_mode:
            return {"changed": False, "floor": floor, "msg": check.line()}
        return {"failed": True, "reason": "floor_not_met", "floor": floor, "msg": _fleet.floor_failure(check, time.monotonic() - started)}

    # -- bake: the batch's host watched --------------------------------------------------------------

    def _bake(self, fleet: t.Mapping[str, t.Any], rollout: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        pause = float(fleet.get("batch_pause") or 0)
        report = plain(self.task_vars.get("sglang_restart_report") or {})
        # (a multi-node deployment's report is its nodes': not baked yet)
        if pause <= 0 or self._play_context.check_mode or report.get("verdict") != "pass" or report.get("node_reports"):
            return {"changed": False, "verdict": "skipped", "msg": "no bake"}
        host = str(self.task_vars.get("inventory_hostname"))
        options = self._options_of(host, BAKE_OPTIONS)
        serving = self._options_of(host, LOOK_OPTIONS)
        # health answers 200 from a server whose scheduler is wedged: each look ends with one generation
        generation = _fleet.generation_url(str(serving["smoke_url"]), self._worker(serving), str(serving["address"]))
        judged = str(report.get("invocation_id") or "") or None
        fatal_before = len(report.get("fatal") or [])
        deadline = time.monotonic() + pause
        why = None
        looks = 0
        while why is None and time.monotonic() < deadline:
            watch = min(BAKE_LOOK_EVERY, max(deadline - time.monotonic(), 0.0))
            probe = self._probe(options, judged, watch)
            looks += 1
            why = _fleet.bake_look(probe, judged, fatal_before) if not probe.get("failed") else f"the probe failed: {probe.get('msg')}"
            if why is not None and not probe.get("failed") and not _fleet.new_fatal(probe, fatal_before):
                # a dying server's last lines reach the journal a moment after its unit changed: they are the evidence
                time.sleep(BAKE_EVIDENCE_WAIT)
                again = self._probe(options, judged, 0)
                if not again.get("failed") and _fleet.new_fatal(again, fatal_before):
                    why = _fleet.bake_look(again, judged, fatal_before)
            if why is None:
                # a token within a look's interval, or the server does not serve
                why = self._generate(generation, serving, BAKE_LOOK_EVERY)
        bake = {
            "verdict": "pass" if why is None else "fail",
            "reason": "baked" if why is None else "bake_failed",
            "msg": why or f"served through {pause:g} s ({looks} look(s), a token each)",
        }
        display.display(f"fleet gate: bake of {host}: {bake['reason']}: {bake['msg']}")
        # what the fleet gate after the batch counts (a bake that failed is a failed deployment)
        _run_results.keep(host, _run_results.BAKE, bake)
        return {"changed": False, **bake, "bake": bake}

    def _out_of_router(self, host: str) -> str:
        """A host that failed its bake serves nothing the router should send it: its worker taken out (what is said of it)."""
        options = self._options_of(host, LOOK_OPTIONS)
        worker = self._worker(options)
        if worker is None:
            return ""
        try:
            router = Router(str(options["router_url"]), options.get("router_api_key") or None, float(options.get("router_timeout") or 30))
            found = router.find(worker)
            if found is not None:
                router.remove(str(found["id"]), worker)
            return f"; {worker} taken out of the router"
        except RouterError as exc:
            return f"; {worker} could not be taken out of the router: {exc}"

    def _probe(self, options: t.Mapping[str, t.Any], invocation: str | None, watch: float) -> dict[str, t.Any]:
        args = {name: options[name] for name in BAKE_OPTIONS}
        args.update(watch=watch, health_early=False)
        if invocation:
            args["invocation_id"] = invocation
        return t.cast(dict[str, t.Any], self._execute_module(module_name="inferops.runbooks.service_probe", module_args=args, task_vars=self.task_vars))

    # -- after: the fleet gate and the tolerance ------------------------------------------------------

    def _after(self, fleet: t.Mapping[str, t.Any], rollout: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        deployments = self._deployments(rollout)
        failed = failed_deployments(deployments)
        batch = [name for name in self._batch(deployments) if name not in failed]
        share, _problem = parse_share(fleet.get("min_serving", 0), f"{FLEET_PREFIX}min_serving")
        gate: Looks = {}
        if share and needed(share, len(deployments)) > 0 and batch and not self._play_context.check_mode:
            gate = self._gate(deployments, batch, float(fleet.get("capacity_timeout") or 0))
            failed.update({name: f"gate_failed: {why}" for name, why in gate.items() if why})
        canary = next(iter(rollout.get("batches") or [[None]]))[0]
        tolerance = _fleet.judge_tolerance(list(failed), len(deployments), float(fleet.get("max_fail_percentage") or 0), canary)
        display.display(f"fleet gate: {tolerance.msg}")
        result = {"changed": False, "failed_deployments": failed, "gate": gate, "msg": tolerance.msg}
        if not tolerance.within:
            result.update(failed=True, reason="tolerance_exceeded")
        return result

    def _gate(self, deployments: t.Mapping[str, list[str]], batch: list[str], timeout: float) -> Looks:
        """The batch's deployments must serve (and be listed by their router) before the next batch; what is left failing."""
        deadline = time.monotonic() + timeout
        while True:
            looks = self._look(deployments, batch)
            if all(why is None for why in looks.values()) or time.monotonic() >= deadline:
                return looks
            waiting = "; ".join(f"{name}: {why}" for name, why in looks.items() if why)
            display.display(f"fleet gate: waiting for the batch to serve ({deadline - time.monotonic():.0f} s left): {waiting}")
            time.sleep(min(LOOK_EVERY, max(deadline - time.monotonic(), 0.1)))

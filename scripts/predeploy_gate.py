"""A pipeline gate on ansible-runner's Python API: run the precheck (or the restart), stream its
progress lines, collect every host's report from the set_stats artifacts, write one JUnit file and
one JSON summary, and decide with a JMESPath policy over the collected reports.

    python scripts/predeploy_gate.py -i inventory/example.yml                        # precheck_sglang
    python scripts/predeploy_gate.py -i inv.yml --playbook restart_vllm --limit gpu-node-11 \\
        -e sglang_restart_budget=1800 --junit out/gate.junit.xml --summary out/gate.json
    python scripts/predeploy_gate.py -i inv.yml \\
        --policy "length(hosts[?verdict == 'fail']) == \\`0\\` && length(hosts[?unrecognized > \\`0\\`]) <= \\`1\\`"

The policy is evaluated over the summary's ``hosts`` list and ``counts`` (see ``summary``); one
entry per host, with the role's artifact fields (verdict, reason, unit, invocation_id, fatal,
unrecognized, ...; numbers as numbers) plus ``host`` and ``playbook``. A host that reported nothing
(unreachable, or failed before its report) appears with verdict ``fail`` and reason ``no_report``.
Without --policy the gate passes when every host passed (``DEFAULT_POLICY``).

Exit codes: 0 the gate passed; 1 it did not (the reason is printed last); 2 bad arguments (a policy
that does not compile, a missing inventory or playbook): nothing was run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ansible_runner
import jmespath
import yaml
from jmespath.exceptions import JMESPathError

REPO = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO / "playbooks"
ARTIFACT_KEYS = ("sglang_precheck", "sglang_restart")
DEFAULT_POLICY = "length(hosts[?verdict != 'pass' && verdict != 'skipped']) == `0`"
NUMBER = re.compile(r"-?\d+(\.\d+)?")
EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class GateError(Exception):
    """Bad input found before anything ran."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="predeploy_gate.py", description=__doc__.split("\n\n", 1)[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    parser.add_argument("--playbook", default="precheck_sglang", help="precheck_sglang (default), restart_sglang, precheck_vllm, restart_vllm, or a path")
    parser.add_argument("--limit", help="host pattern, as ansible-playbook --limit")
    parser.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE", help="extra variables (repeatable)")
    policy = parser.add_mutually_exclusive_group()
    policy.add_argument("--policy", help=f"JMESPath expression that must be true (default: {DEFAULT_POLICY})")
    policy.add_argument("--policy-file", type=Path, help="file holding the JMESPath expression")
    parser.add_argument("--junit", type=Path, default=Path("predeploy-gate.junit.xml"), help="JUnit XML output (default: %(default)s)")
    parser.add_argument("--summary", type=Path, default=Path("predeploy-gate.json"), help="JSON summary output (default: %(default)s)")
    parser.add_argument("--private-data-dir", type=Path, help="keep ansible-runner's artifacts here (default: a temporary directory)")
    parser.add_argument("--timeout", type=int, default=0, help="stop the run after this many seconds (default: none)")
    return parser.parse_args(argv)


def resolve_playbook(name: str) -> Path:
    path = Path(name)
    if not path.suffix and path.parent == Path("."):
        path = PLAYBOOKS / f"{name}.yml"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in PLAYBOOKS.glob("*.yml")))
        raise GateError(f"--playbook {name!r}: no such playbook (shipped: {shipped})")
    return path.resolve()


def extra_vars(items: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE pairs (values as text, the way a survey sends them) and @FILE (YAML or JSON)."""
    merged: dict[str, Any] = {}
    for item in items:
        if item.startswith("@"):
            try:
                loaded = yaml.safe_load(Path(item[1:]).read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise GateError(f"-e {item}: {exc}") from None
            if not isinstance(loaded, dict):
                raise GateError(f"-e {item}: expected a mapping of variables")
            merged.update(loaded)
        else:
            key, sep, value = item.partition("=")
            if not sep or not key.isidentifier():
                raise GateError(f"-e {item!r}: expected KEY=VALUE or @FILE")
            merged[key] = value
    return merged


def compile_policy(args: argparse.Namespace) -> tuple[str, Any]:
    if args.policy_file:
        try:
            text = args.policy_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise GateError(f"--policy-file: {exc}") from None
    else:
        text = args.policy or DEFAULT_POLICY
    try:
        return text, jmespath.compile(text)
    except JMESPathError as exc:
        raise GateError(f"the policy {text!r} is not a JMESPath expression: {exc}") from None


def stream(event: Mapping[str, Any]) -> bool:
    """ansible-runner event handler: print the playbook's output as it comes (progress lines included)."""
    text = event.get("stdout")
    if text:
        print(text, flush=True)
    return True


def run_playbook(args: argparse.Namespace, playbook: Path, variables: dict[str, Any], data_dir: Path) -> Any:
    envvars = {"ANSIBLE_CONFIG": os.environ.get("ANSIBLE_CONFIG", str(REPO / "ansible.cfg")), "ANSIBLE_NOCOLOR": "1"}
    return ansible_runner.run(
        private_data_dir=str(data_dir),
        project_dir=str(REPO),
        playbook=str(playbook),
        inventory=str(Path(args.inventory).resolve()),
        limit=args.limit,
        extravars=variables,
        envvars=envvars,
        quiet=True,
        event_handler=stream,
        timeout=args.timeout or None,
    )


def as_number(key: str, value: Any) -> Any:
    """Artifact values may come as text (ansible-core before 2.19 renders templates to strings)."""
    if isinstance(value, str) and not key.endswith("_id") and NUMBER.fullmatch(value):
        return float(value) if "." in value else int(value)
    return value


def collect(events: Sequence[Mapping[str, Any]], playbook: Path) -> list[dict[str, Any]]:
    """One entry per host: its set_stats artifacts, or a no_report failure for a host that ran but
    reported nothing."""
    stats = [e["event_data"] for e in events if e.get("event") == "playbook_on_stats"]
    final = stats[-1] if stats else {}
    artifacts = final.get("artifact_data") or {}
    hosts: dict[str, dict[str, Any]] = {}
    for key in ARTIFACT_KEYS:
        for host, fields in (artifacts.get(key) or {}).items():
            hosts[host] = {"host": host, "playbook": playbook.stem, "kind": key, **{k: as_number(k, v) for k, v in fields.items()}}
    seen = set()
    for counter in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
        seen |= set(final.get(counter) or {})
    for host in sorted(seen - set(hosts)):
        unreachable = host in (final.get("dark") or {})
        reason = "unreachable" if unreachable else "no_report"
        hosts[host] = {"host": host, "playbook": playbook.stem, "kind": None, "verdict": "fail", "reason": reason}
    return [hosts[name] for name in sorted(hosts)]


def summarize(runner: Any, hosts: list[dict[str, Any]], playbook: Path) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for host in hosts:
        counts[str(host.get("verdict"))] = counts.get(str(host.get("verdict")), 0) + 1
    shown = playbook.relative_to(REPO) if playbook.is_relative_to(REPO) else playbook
    return {"playbook": str(shown), "status": runner.status, "rc": runner.rc, "hosts": hosts, "counts": counts}


def decide(summary: dict[str, Any], policy_text: str, policy: Any) -> tuple[bool, str]:
    """The gate's verdict and its reason. The policy decides once the run finished and hosts reported."""
    if summary["status"] not in ("successful", "failed"):
        return False, f"the playbook did not finish (ansible-runner status {summary['status']}, rc {summary['rc']})"
    if not summary["hosts"]:
        return False, "no host reported: the inventory or --limit matched no host"
    result = policy.search({"hosts": summary["hosts"], "counts": summary["counts"]})
    if result:
        return True, f"policy passed: {policy_text}"
    failing = [f"{h['host']} {h.get('verdict')} ({h.get('reason')})" for h in summary["hosts"] if h.get("verdict") not in ("pass", "skipped")]
    detail = f"; hosts not passing: {', '.join(failing)}" if failing else ""
    return False, f"policy failed: {policy_text} evaluated to {json.dumps(result)}{detail}"


def junit(summary: dict[str, Any], passed: bool, reason: str) -> ET.ElementTree:
    """One test case per host (failed, skipped or passed, with its report) and one for the policy."""
    name = f"predeploy_gate.{Path(summary['playbook']).stem}"
    tests = str(len(summary["hosts"]) + 1)
    failures = str(sum(h.get("verdict") == "fail" for h in summary["hosts"]) + (not passed))
    suites = ET.Element("testsuites", name="predeploy_gate", tests=tests, failures=failures)
    suite = ET.SubElement(suites, "testsuite", name=name, tests=tests, failures=failures)
    for host in summary["hosts"]:
        case = ET.SubElement(suite, "testcase", classname=name, name=host["host"])
        if host.get("verdict") == "fail":
            failure = ET.SubElement(case, "failure", type=str(host.get("reason")), message=f"{host['host']}: {host.get('reason')}")
            failure.text = json.dumps(host, indent=1, default=str)
        elif host.get("verdict") == "skipped":
            ET.SubElement(case, "skipped", message=str(host.get("reason")))
    policy_case = ET.SubElement(suite, "testcase", classname="predeploy_gate", name="policy")
    if not passed:
        ET.SubElement(policy_case, "failure", type="policy", message=reason).text = reason
    return ET.ElementTree(suites)


def write_outputs(args: argparse.Namespace, summary: dict[str, Any], passed: bool, reason: str) -> None:
    for path in (args.summary, args.junit):
        path.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps({**summary, "gate": {"passed": passed, "reason": reason}}, indent=2, default=str) + "\n", encoding="utf-8")
    tree = junit(summary, passed, reason)
    ET.indent(tree)
    tree.write(args.junit, encoding="utf-8", xml_declaration=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        playbook = resolve_playbook(args.playbook)
        if not Path(args.inventory).exists():
            raise GateError(f"--inventory {args.inventory}: no such file or directory")
        variables = extra_vars(args.extra_var)
        policy_text, policy = compile_policy(args)
    except GateError as err:
        print(f"predeploy_gate: {err}", file=sys.stderr)
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="predeploy-gate.") as tmp:
        data_dir = args.private_data_dir or Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        runner = run_playbook(args, playbook, variables, data_dir)
        summary = summarize(runner, collect(list(runner.events), playbook), playbook)
    passed, reason = decide(summary, policy_text, policy)
    write_outputs(args, summary, passed, reason)
    print(f"predeploy_gate: {'PASS' if passed else 'FAIL'} - {reason} (summary {args.summary}, JUnit {args.junit})")
    return EXIT_PASS if passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())

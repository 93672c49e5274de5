# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options every journal-classifying plugin of the collection shares."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  engine:
    description:
      - Which inference engine wrote the journal, to choose the shipped rule packs.
      - V(auto) uses the rules of every engine.
      - With V(sglang), only SGLang's own marker (C(The server is fired up and ready to roll)) is ready; uvicorn's
        C(Application startup complete) is progress (SGLang still runs its warmup request then). With V(vllm) and
        V(auto), uvicorn's start-up line is ready, as vLLM serves from then on.
    type: str
    choices: [auto, sglang, vllm]
    default: sglang
  extra_rules:
    description:
      - Your own rules, tried before the shipped ones.
      - Each rule is a mapping with C(id) (a string), C(pattern) and C(reason) (a string); optionally C(class)
        (default V(allowlisted); one of V(fatal), V(allowlisted), V(request_error), V(survived), V(unrecognized), V(ready),
        V(progress), V(info)), C(reference) (a string), C(expires) (YYYY-MM-DD, after which the rule is reported as stale),
        C(phase) (a start phase), C(levels) (a list of V(none), V(DEBUG), V(INFO), V(WARNING), V(ERROR), V(CRITICAL)),
        C(progress_bar) (true or false), C(file) (the engine's source file that logs the line - where a line names the
        file that logged it, as vLLM's C([repo_utils.py:47]) does, the rule holds only for lines of that file).
      - C(pattern) is a case-insensitive regular expression searched in the message without its timestamp,
        rank and level prefixes; or a list of such expressions, meaning any of them (each is its own
        expression, never a character class). A number or any other type is refused.
      - A rule sees at most the first 16384 characters of a line (a longer line is cut, with a note of how much
        was left out). A pattern whose cost grows faster than the line (nested or overlapping repeats that
        backtrack without bound, such as V((a+\)+$), or unanchored repeats tried from every position) is refused
        before any line is read, with a message naming the rule - by the roles' validation and
        M(inferops.runbooks.wait_ready) on the controller, by the filters, and by M(inferops.runbooks.journal_scan).
        Each rule is first tried, in a separate process stopped after half a second of CPU, on long adversarial
        lines - runs of common characters, and lines made from the pattern's own repeats.
        M(inferops.runbooks.service_probe), which the wait calls again and again, leaves that check to its caller.
      - A rule that cannot be used fails the task with a message naming it.
    type: list
    elements: dict
    default: []
  disabled_rules:
    description:
      - Ids of shipped rules to leave out. An id that matches no rule, or an entry that is not a string, fails the task.
    type: list
    elements: str
    default: []
  redact:
    description:
      - Secrets (an API key) taken out of everything the result holds, on the target before it is
        returned - events, their keys, evidence, tracebacks and journal lines - each replaced by C([redacted]),
        also where a long line was cut inside one or where the event key masks digits.
      - Never logged (C(no_log)).
    type: list
    elements: str
    default: []
  strict:
    description:
      - Fail on lines that look like problems but that no rule recognises, instead of only reporting
        them with a suggested rule.
    type: bool
    default: false
"""

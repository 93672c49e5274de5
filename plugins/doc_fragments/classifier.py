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
    type: str
    choices: [auto, sglang, vllm]
    default: sglang
  extra_rules:
    description:
      - Your own rules, tried before the shipped ones.
      - Each rule is a mapping with C(id), C(pattern) (a case-insensitive regular expression searched in the
        message without its timestamp, rank and level prefixes) and C(reason); optionally C(class)
        (default V(allowlisted); one of V(fatal), V(allowlisted), V(unrecognized), V(ready), V(progress), V(info)),
        C(reference), C(expires) (YYYY-MM-DD, after which the rule is reported as stale), C(phase),
        C(levels), C(progress_bar).
      - A rule that cannot be used fails the task with a message naming it.
    type: list
    elements: dict
    default: []
  disabled_rules:
    description:
      - Ids of shipped rules to leave out. An id that matches no rule fails the task.
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

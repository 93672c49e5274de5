# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: a check done once per run of ``ansible-playbook``, whichever fork asks.

Private to the collection; may change at any time. Each task of each host runs in a process of its
own, forked from the main one, so what one fork learnt is lost to the next: checking the same
rules again cost every phase of every host a fifth of a second (their patterns compiled and tried
on adversarial lines). The outcome of a check is kept as a file in the run's local temporary
directory (where ansible-core keeps the modules it built, removed when the run ends), named by a
hash of what was checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import typing as t

from ansible import constants as C

from ansible_collections.inferops.runbooks.plugins.plugin_utils._options import rule_problems
from ansible_collections.inferops.runbooks.plugins.plugin_utils._run_dir import built_once

Problems = list[str]


def rule_problems_once(engine: str, extra_rules: t.Sequence[t.Any], disabled_rules: t.Sequence[str]) -> Problems:
    """``rule_problems`` (without a prefix), once per run for the same rules: the prepare phase of
    the first host checks them, every later phase and host of the run reads the outcome."""
    return once("rules", [engine, extra_rules, disabled_rules], lambda: rule_problems(engine, extra_rules, disabled_rules))


def once(kind: str, checked: t.Any, check: t.Callable[[], Problems]) -> Problems:
    """``check()``'s problems for ``checked`` (JSON-able data): computed by the first process of the
    run that asks (the hosts' forks asking at the same moment wait for it), read back by every later
    one. A cache that cannot be read or written is skipped."""
    return built_once(_path(kind, checked), _kept, check, _keep)


def _kept(path: str) -> Problems | None:
    try:
        with open(path, encoding="utf-8") as kept:
            found = json.load(kept)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, list) and all(isinstance(problem, str) for problem in found) else None


def _path(kind: str, checked: t.Any) -> str:
    text = json.dumps(checked, sort_keys=True, default=repr)
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
    return os.path.join(str(C.DEFAULT_LOCAL_TMP), "inferops-once", f"{kind}-{digest}.json")


def _keep(path: str, problems: Problems) -> None:
    handle, partial = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".part")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(problems, out)
    os.replace(partial, path)

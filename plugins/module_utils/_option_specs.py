# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options the modules share, declared once: argument specs of the unit, the health probe and the
classifier.

Private to the collection; may change at any time. Host side: standard library only, no Ansible
imports. The modules (``service_probe``, ``journal_scan``, ``unit_info``), the wait's action and the
roles' checks (``plugin_utils/_options``) take them from here, so one option has one type and one
default everywhere; the doc fragments in ``plugins/doc_fragments/`` document the same options.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils import _engines

ENGINES = _engines.ENGINE_NAMES
# the engine a journal is read for unless told otherwise, and its driver's unit and health endpoint
DEFAULT_ENGINE = "sglang"
DEFAULT_UNIT = _engines.get(DEFAULT_ENGINE).default_unit
DEFAULT_HEALTH_URL = f"http://127.0.0.1:{_engines.get(DEFAULT_ENGINE).default_port}{_engines.get(DEFAULT_ENGINE).health_path}"

Spec = t.Dict[str, t.Dict[str, t.Any]]

CLASSIFIER_OPTIONS: Spec = {
    "engine": {"type": "str", "default": DEFAULT_ENGINE, "choices": list(ENGINES)},
    "extra_rules": {"type": "list", "elements": "dict", "default": []},
    "disabled_rules": {"type": "list", "elements": "str", "default": []},
    "strict": {"type": "bool", "default": False},
    "redact": {"type": "list", "elements": "str", "default": [], "no_log": True},
}

HEALTH_OPTIONS: Spec = {
    "health_url": {"type": "str", "default": DEFAULT_HEALTH_URL},
    "health_timeout": {"type": "float", "default": 30},
    "validate_certs": {"type": "bool", "default": True},
}

UNIT_OPTIONS: Spec = {
    "unit": {"type": "str", "default": DEFAULT_UNIT},
}


def merged(*specs: Spec) -> Spec:
    """One argument spec of several, each option copied (AnsibleModule may change its spec)."""
    result: Spec = {}
    for spec in specs:
        for name, option in spec.items():
            result[name] = dict(option)
    return result

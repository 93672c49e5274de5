# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for deploying a change with a restart: thin shells around plugins/module_utils/_deploy.py."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.runbooks.plugins.module_utils._deploy import deploy_option_problems, running_requests


def deploy_problems(options: t.Any, base_dir: str = ".") -> list[str]:
    """What is wrong with the role's deploy, rollback and traffic variables (empty: nothing)."""
    if not isinstance(options, t.Mapping):
        raise AnsibleFilterError(f"deploy_problems: input must be a mapping of variable names to values, got {type(options).__name__}")
    return deploy_option_problems({str(key): value for key, value in options.items()}, str(base_dir))


def load_running_requests(answer: t.Any) -> int | None:
    """Requests a server runs or queues, read from a /get_load, /v1/loads or /metrics answer."""
    return running_requests(answer)


class FilterModule:
    """inferops.runbooks deploy filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"deploy_problems": deploy_problems, "running_requests": load_running_requests}

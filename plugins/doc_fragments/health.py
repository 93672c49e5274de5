# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of the plugins that probe an inference server's health endpoint."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  health_timeout:
    description:
      - Seconds to wait for the health endpoint's answer; SGLang's can take up to 20 s. More than 0.
    type: float
    default: 30
  validate_certs:
    description:
      - Check the certificate of an C(https) health endpoint.
    type: bool
    default: true
"""

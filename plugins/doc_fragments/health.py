# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of the plugins that probe an inference server's health endpoint."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  health_url:
    description:
      - The health endpoint, probed from the managed host (so a server bound to 127.0.0.1 works), without credentials.
      - Use an endpoint that proves the server generates (SGLang's C(/health_generate) or C(/health); vLLM's C(/health));
        C(/v1/models) and C(/model_info) answer 200 before the server can generate.
    type: str
    default: http://127.0.0.1:30000/health_generate
  health_timeout:
    description:
      - Seconds to wait for the health endpoint's answer; SGLang's can take up to 20 s.
    type: float
    default: 30
  validate_certs:
    description:
      - Check the certificate of an C(https) health endpoint.
    type: bool
    default: true
"""

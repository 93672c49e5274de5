# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The read-only target-side modules: the unit they look at, and their attributes."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: The module only reads.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  unit:
    description:
      - The systemd unit; C(.service) is added to a name without a unit suffix.
    type: str
    default: sglang.service
"""

# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes of the collection's actions that run on the controller alone."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  action:
    support: full
    description: Runs on the controller only; the managed host is not contacted.
  async:
    support: none
    description: Runs at once on the controller.
  diff_mode:
    support: none
    description: No diff is shown.
  platform:
    support: full
    platforms: posix
    description: The controller.
"""

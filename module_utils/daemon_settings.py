# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Docker's daemon.json with the fleet's settings laid over the operator's: read, merged and written whole, in the
layout Ansible's to_nice_json gives (four spaces, keys sorted), so a file this collection wrote before reads as
unchanged. The docker_daemon_settings module runs it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import JSON_KINDS
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import read_text, settle_file


class SettingsError(Exception):
    """A daemon.json that is not a JSON object; the message names the file, what it holds and the fix."""


def parse(path, text):
    """The settings a file's text holds: {} when it is missing (None) or empty."""
    if text is None or not text.strip():
        return {}
    try:
        settings = json.loads(text)
    except ValueError as error:
        raise SettingsError("%s is not JSON (%s), and Docker's daemon does not start with it either. Fix: correct the "
                            "file, or remove it so that it holds only docker_runtime_daemon_options"
                            % (path, error)) from None
    if not isinstance(settings, dict):
        raise SettingsError("%s holds %s, expected a JSON object of the daemon's settings. Fix: correct the file, "
                            "or remove it so that it holds only docker_runtime_daemon_options"
                            % (path, JSON_KINDS.get(type(settings), "no object")))
    return settings


def layout(settings):
    """The file's text, as `{{ settings | to_nice_json }}` and a line break render it."""
    return json.dumps(settings, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def merge(path, settings, mode, check_mode, keep=None):
    """Makes the file hold its own settings with these laid over them, with this mode; keep(path), when given, is
    called before a file that is there is written over (a backup), and what it returns is returned.
    Returns (changed, the settings before, the settings after, what keep returned or None)."""
    found = read_text(path, None)
    before = parse(path, found)
    after = dict(before, **settings)
    changed, kept = settle_file(path, found, layout(after), mode, check_mode, before_write=keep)
    return changed, before, after, kept

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The file system (mount point) holding each of the fleet's paths, as a text file of the node exporter's textfile
collector (ascend_fleet_path_info): the alerts and dashboards join it with node_filesystem_* by mountpoint. The
path_mounts module runs it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import read_text, settle_file

HEADER = (
    "# Written by ascend.fleet.host_exporters: the file system (mount point) of each of the fleet's paths.\n"
    "# HELP ascend_fleet_path_info A path of the fleet (model, cache, Docker's data, logs) and the file system "
    "holding it\n"
    "# TYPE ascend_fleet_path_info gauge\n")


def run_df(path, timeout):
    """(exit code, stdout) of `df --output=target` for path; a hung network mount ends at the timeout (None)."""
    try:
        result = subprocess.run(["df", "--output=target", "--", path], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, timeout=timeout, check=False, universal_newlines=True)
    except (subprocess.TimeoutExpired, OSError):
        return None, ""
    return result.returncode, result.stdout


def mount_point(path, timeout, runner=run_df):
    """The mount point of the file system holding path, as df names it (the node exporter's mountpoint label), or
    None where the host does not have the path (the model folder of a gateway: nothing to watch) or df does not
    answer in time."""
    code, output = runner(path, timeout)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if code == 0 and len(lines) > 1 else None


def label_value(text):
    """A label value as Prometheus' text format spells it: backslash, double quote and line feed escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(paths, mounts):
    """The file's text: one sample per path whose file system was found, in the order of paths (name -> path)."""
    lines = ['ascend_fleet_path_info{path="%s",use="%s",mountpoint="%s"} 1\n' % (
        label_value(path), label_value(use), label_value(mounts[use])) for use, path in paths.items()
        if mounts.get(use) is not None]
    return HEADER + "".join(lines)


def describe(paths, dest, mode, timeout, check_mode, runner=run_df):
    """Makes dest describe paths. Returns (changed, mounts, text before or None, text after)."""
    mounts = dict((use, mount_point(path, timeout, runner)) for use, path in paths.items())
    text = render(paths, mounts)
    found = read_text(dest, None)
    if found is None and not check_mode and not os.path.isdir(os.path.dirname(dest)):
        os.makedirs(os.path.dirname(dest), 0o755)
    changed, _kept = settle_file(dest, found, text, mode, check_mode)
    return changed, mounts, found, text

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark baselines, and the canary gate's comparison of a run with one. Standard library only (runs on hosts).

A baseline is one run of a preset on one instance, kept as the baseline of the spec it measured: the instance's
container config hash (its docker run lines, its image's ID and its key, salted: vllm_instance), with the image's
name and the preset. An instance's baselines are one JSON file, ``<baselines dir>/<instance>.json``; the newest
MAX_BASELINES are kept.

The comparison pairs the groups both runs measured reliably (same image size, output length and concurrency) and
reads two metrics of each: output throughput (higher is better) and p95 latency (lower is better). One group
against one group would take run-to-run noise for a change, so the groups' log ratios (canary / baseline) are
averaged - a geometric mean - and a bootstrap over the groups (resampled RESAMPLES times, with a fixed seed, so the
same figures give the same verdict) gives an interval for that mean. A metric regressed when its estimate is worse
than ``max_regression`` and the whole interval is worse than no change: a slowdown the groups agree on, not one
group's noise. A canary whose answers fail the answer check, or with groups the baseline measured reliably that it
did not, fails whatever its speed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import random

from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import group_key, measured
from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import CONFIG_HASH_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import ASIDE_CONTAINER, write_atomically

FORMAT = 1
MAX_BASELINES = 10
RESAMPLES = 2000
# What `docker container inspect` reads of a container to name its spec (never Config.Env, which may hold the key).
SPEC_FORMAT = ('{"name": {{json .Name}}, "labels": {{json .Config.Labels}}, "image": {{json .Config.Image}}, '
               '"image_id": {{json .Image}}}')
# (metric, what the record calls it, +1 when more is better and -1 when less is)
METRICS = (("throughput", "output_tokens_per_s", 1), ("p95_latency", "p95_latency_s", -1))


# The options of the modules that read baselines (plugins/doc_fragments/bench_baselines.py documents them).
BASELINE_OPTIONS = dict(
    baselines_dir=dict(type="path", default="/var/lib/vllm-bench/baselines"),
    docker=dict(type="str", default="docker"),
    label_prefix=dict(type="str", default="ascend-vllm-fleet"),
)


class BaselineError(Exception):
    """A baselines file that cannot be read or written; the message names it and the fix."""


def baselines_file(folder, instance):
    return os.path.join(folder, instance + ".json")


def spec_key(config_hash, preset):
    return "%s/%s" % (preset, config_hash)


def read_ours(path, what, field, fix):
    """The `field` mapping of a JSON file this collection writes ({"format": FORMAT, field: {...}}); no file: an empty
    one. A file that is not ours is refused, naming it as `what` and the fix, never overwritten."""
    try:
        with open(path, encoding="utf-8") as handle:
            content = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise BaselineError("%s %s cannot be read (%s): expected the JSON this collection writes. Fix: %s"
                            % (what, path, error, fix)) from None
    if not (isinstance(content, dict) and content.get("format") == FORMAT and isinstance(content.get(field), dict)):
        raise BaselineError("%s %s is not of format %d: expected {\"format\": %d, \"%s\": {...}}. Fix: %s"
                            % (what, path, FORMAT, FORMAT, field, fix))
    return content[field]


def read_baselines(path):
    """{spec key: baseline} of a baselines file; no file: none."""
    return read_ours(path, "baselines file", "baselines", "move it aside (its baselines are lost) and record a "
                     "baseline again")


def write_json(path, content):
    """A JSON file written whole or not at all, its folder made first."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    write_atomically(path, json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False) + "\n", 0o644)


def container_specs(docker, name, label_prefix):
    """{container name: {"config_hash", "image", "image_id"}} of the instance's container and of the one a
    replacement set aside (<name>-previous), those that exist. The config hash is vllm_instance's label.
    BaselineError when the instance's own container does not exist."""
    code, out, err = run_docker(docker, "container", "inspect", "--format", SPEC_FORMAT, "--", name,
                                name + ASIDE_CONTAINER)
    specs = {}
    for line in out.splitlines():
        if line.strip():
            found = json.loads(line)
            labels = found["labels"] or {}
            specs[found["name"].lstrip("/")] = {"config_hash": labels.get(label_name(label_prefix, CONFIG_HASH_LABEL)),
                                                "image": found["image"], "image_id": found["image_id"]}
    if name not in specs:
        raise BaselineError("container %s cannot be inspected (%s): expected the instance's container, as the "
                            "server phase starts it. Fix: deploy first (ansible-playbook site.yml)"
                            % (name, (err or out).strip() or "exit code %s" % code))
    return specs


def with_baseline(baselines, baseline):
    """The baselines with `baseline` recorded as its spec's (replacing one recorded before), the newest
    MAX_BASELINES kept."""
    kept = dict(baselines)
    kept[spec_key(baseline["config_hash"], baseline["preset"])] = baseline
    newest = sorted(kept.items(), key=lambda item: item[1].get("recorded_at", 0), reverse=True)[:MAX_BASELINES]
    return dict(newest)


def write_baselines(path, baselines):
    write_json(path, {"format": FORMAT, "baselines": baselines})


def _interval(values, confidence, rng):
    """(mean, low, high) of values, low and high the central `confidence` interval of the bootstrap's means."""
    centre = sum(values) / len(values)
    if len(values) < 2:
        return centre, centre, centre
    means = sorted(sum(rng.choice(values) for _value in values) / len(values) for _resample in range(RESAMPLES))
    tail = (1 - confidence) / 2
    return centre, means[int(tail * (RESAMPLES - 1))], means[int(math.ceil((1 - tail) * (RESAMPLES - 1)))]


def compare(baseline_groups, canary_groups, max_regression, confidence=0.9):
    """How the canary's groups compare with the baseline's (the module docstring says how).

    Returns {"groups": [one dict per group both measured: its GROUP_FIELDS, each metric's baseline and canary
    value], "metrics": {metric: {"regression", "low", "high", "regressed"}}, "missing": [groups the baseline measured
    and the canary did not], "regressed": bool}. A regression is a share: 0.3 is 30 % worse (throughput 30 % lower,
    p95 latency 30 % higher); low and high bound it."""
    baseline = {group_key(record): record for record in baseline_groups if measured(record)}
    canary = {group_key(record): record for record in canary_groups if measured(record)}
    paired = [key for key in baseline if key in canary
              and all((baseline[key].get(field) or 0) > 0 and (canary[key].get(field) or 0) > 0
                      for _name, field, _better in METRICS)]
    result = {"groups": [], "metrics": {}, "missing": [list(key) for key in baseline if key not in canary],
              "regressed": False}
    for key in paired:
        row = dict(zip(("image_size", "max_tokens", "concurrency"), key))
        for name, field, _better in METRICS:
            row[name] = {"baseline": baseline[key][field], "canary": canary[key][field]}
        result["groups"].append(row)
    rng = random.Random(0)
    for name, field, better in METRICS:
        if not paired:
            continue
        # The log of how many times worse each group is: positive is a regression, whichever way the metric goes.
        worse = [-better * math.log(canary[key][field] / baseline[key][field]) for key in paired]
        centre, low, high = _interval(worse, confidence, rng)
        regression, low, high = (round(_share(value, better), 4) for value in (centre, low, high))
        result["metrics"][name] = {"regression": regression, "low": low, "high": high,
                                   "regressed": regression > max_regression and low > 0}
    result["regressed"] = bool(result["missing"]) or any(m["regressed"] for m in result["metrics"].values())
    return result


def _share(log_worse, better):
    """A log of 'times worse' as the share a reader expects: throughput lost, or latency added."""
    return 1 - math.exp(-log_worse) if better > 0 else math.exp(log_worse) - 1

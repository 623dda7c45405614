# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The labels on this collection's containers, named under the operator's prefix (fleet_label_prefix): the one
place their names are spelled.

<prefix>.instance marks a container as this collection's and names the instance it serves; .host and .port say
where it serves, .served-name what (the benchmark reads them); .config-hash is the hash of its `docker run`, by
which vllm_instance keeps or replaces it, the verification tells a container that does not run its rendered script,
and a benchmark baseline names its spec.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

INSTANCE_LABEL = "instance"
HOST_LABEL = "host"
PORT_LABEL = "port"
SERVED_NAME_LABEL = "served-name"
CONFIG_HASH_LABEL = "config-hash"


def label_name(label_prefix, label):
    """The full name of one of the labels above on a container deployed under label_prefix."""
    return "%s.%s" % (label_prefix, label)


def deploy_prefixes(labels):
    """The prefixes under which a container's labels mark it as an instance of this collection, as the server phase
    labels one (<prefix>.instance beside <prefix>.host): a deploy of this collection under another prefix."""
    suffix = label_name("", INSTANCE_LABEL)
    return sorted(key[:-len(suffix)] for key in labels
                  if key.endswith(suffix) and label_name(key[:-len(suffix)], HOST_LABEL) in labels)

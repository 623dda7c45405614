# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of module options that Ansible's argument spec leaves to the module, with the messages every module
gives: the option, its value, what was expected and how to fix it.

Ansible converts types and refuses unknown or missing options; what a value means (a count of at least one, a
finite number of seconds, a name that is not empty) only the module knows, and a value that slips through
fails later with a cause that is not the option's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

# How JSON values a module reads (an index, a settings file) are named in messages, as their author would name them.
JSON_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
              bool: "true or false", type(None): "null"}


class OptionError(Exception):
    """An option's value the module cannot use; the message names the option, what was expected and the fix."""


def number_at_least(params, option, minimum, fix):
    """params[option] when it is a finite number of at least minimum; OptionError otherwise (NaN and infinity
    included: a sleep or a socket timeout of either fails far from the option)."""
    value = params[option]
    if not (math.isfinite(value) and value >= minimum):
        raise OptionError("%s: %g is not allowed: expected a number of at least %s. Fix: %s"
                          % (option, value, minimum, fix))
    return value


def number_above(params, option, floor, fix):
    """params[option] when it is a finite number greater than floor; OptionError otherwise."""
    value = params[option]
    if not (math.isfinite(value) and value > floor):
        raise OptionError("%s: %g is not allowed: expected a number more than %s. Fix: %s"
                          % (option, value, floor, fix))
    return value


def text_given(params, option, expected, fix):
    """params[option] without surrounding white space, when something is left; OptionError otherwise."""
    value = (params[option] or "").strip()
    if not value:
        raise OptionError("%s is empty: expected %s. Fix: %s" % (option, expected, fix))
    return value


def octal_mode(params, option):
    """params[option], a file's mode given as an octal string ("0644"), as a number; OptionError otherwise."""
    try:
        return int(params[option], 8)
    except ValueError:
        raise OptionError('%s %r: expected an octal string such as 0644. Fix: quote it, "0644"'
                          % (option, params[option])) from None


def unexpected_failure(doing, error):
    """The message of a failure no check foresaw: what the module was doing and the error, with no traceback.

    The error's own text is kept, since it usually names the file or call that failed; options that hold secrets
    are no_log, so Ansible masks them in any message.
    """
    return ("%s failed unexpectedly: %s: %s. Fix: the options were accepted, so look on the host for what the "
            "error names (a file, a permission, a full disk, a tool of another version) and run the task again"
            % (doing, type(error).__name__, error))

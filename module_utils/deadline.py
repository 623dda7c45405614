# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One deadline for the whole of a module's call: each wait in it (a Docker or npu-smi call, an HTTP request, a
read of a socket, a pause between two polls) gets only what is left of it.

A time option that bounded each wait alone would bound none of their sum: a call that waits on a hung daemon
several times, or on a peer that sends a byte now and then, would take many times the option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time


class DeadlinePassed(Exception):
    """The deadline passed while the module waited; waiting_on names what it waited on, in a few words."""

    def __init__(self, seconds, waiting_on):
        self.seconds, self.waiting_on = seconds, waiting_on
        super(DeadlinePassed, self).__init__("no end within %ss: the time ran out while waiting for %s"
                                             % (seconds, waiting_on))


class Deadline:
    """The moment `seconds` (a time option's value, which messages name) from now, or from ends when given."""

    def __init__(self, seconds, ends=None):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds if ends is None else ends

    def left(self):
        return max(0.0, self.ends - time.monotonic())

    def passed(self):
        return self.left() <= 0

    def allow(self, waiting_on, most=None):
        """The seconds one wait for waiting_on may take: what is left, and at most `most` when given.
        DeadlinePassed once nothing is left: a wait of no time would be a wait without end to some callers
        (subprocess's timeout 0 is none to run_docker)."""
        left = self.left()
        if left <= 0:
            raise DeadlinePassed(self.seconds, waiting_on)
        return left if most is None else min(left, most)

    def check(self, waiting_on):
        """DeadlinePassed when the deadline has passed: a wait that ended without an answer was cut by it."""
        self.allow(waiting_on)

    def sleep(self, seconds):
        """A pause between two polls, never past the deadline."""
        time.sleep(min(seconds, self.left()))

    def before(self, seconds):
        """A deadline `seconds` earlier (now, when less is left), named as this one: the waits run within it, so
        that what must follow them once they fail (a log tail, a last look) still has time."""
        return Deadline(self.seconds, max(time.monotonic(), self.ends - seconds))

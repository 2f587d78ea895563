"""Callback ``patchkit.fleet.results``: each task's result on each host as one JSON line in the
file named by ``$PATCHKIT_FLEET_RESULTS`` (flushed at once, so a killed run leaves what it saw),
and a ``started`` line for each task on each host before its worker starts: a host with no
such line for a task never ran it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: results
type: aggregate
short_description: Write every task result as a JSON line for patchkit
description:
  - Used by patchkit's fleet commands to read each host's engine result. Enable it with
    C(callbacks_enabled) and set C(PATCHKIT_FLEET_RESULTS) to the file to append to.
requirements:
  - PATCHKIT_FLEET_RESULTS set in the environment
"""

import json
import os

from ansible.plugins.callback import CallbackBase

KEPT = ("patchkit", "msg", "rc", "stdout", "stderr", "changed", "skipped", "skip_reason")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "patchkit.fleet.results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        path = os.environ.get("PATCHKIT_FLEET_RESULTS")
        self._out = open(path, "a", encoding="utf-8") if path else None
        try:  # here, in ansible-playbook's main process: each host's forked worker inherits it
            from patchkit.targets import protocol
        except ImportError:
            return  # the engine task says what is missing
        protocol.warm()

    def _write(self, result, status):
        if self._out is None:
            return
        raw, host, task = _public(result, "result"), _public(result, "host"), _public(result, "task")
        line = {"host": host.get_name(), "task": task.get_name(), "action": task.action,
                "status": status}
        line.update({key: _plain(raw[key]) for key in KEPT if key in raw})
        self._line(line)

    def _line(self, line):
        self._out.write(json.dumps(line, default=str) + "\n")
        self._out.flush()

    def v2_runner_on_start(self, host, task):
        # sent by ansible-playbook's main process right before it starts the host's worker
        if self._out is not None:
            self._line({"host": host.get_name(), "task": task.get_name(), "action": task.action,
                        "status": "started"})

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._write(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")


def _public(result, name):
    """The task result's public ``result``, ``host`` or ``task`` (ansible-core 2.19 on), else
    the private name older releases have only: 2.19 deprecates the private ones."""
    try:
        return getattr(result, name)
    except AttributeError:
        return getattr(result, "_" + name)


def _plain(value):
    """Ansible's tagged strings and containers as plain JSON values."""
    return json.loads(json.dumps(value, default=str))

#!/usr/bin/python
"""Documentation of ``patchkit.fleet.engine``. Its action plugin (plugins/action/engine.py) does
the work: it runs patchkit's engine on the host through the agent an ``ssh://`` target uses, so
no module is sent to the host; like ``ansible.builtin.debug``, this file only documents it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: engine
short_description: Apply, roll back, verify or report patchkit fixes on a host, all-or-nothing
description:
  - Runs patchkit's engine, the same code a local or C(ssh://) target runs, with a request
    rendered on the controller by C(patchkit plan FIX... --json). One call is one engine
    transaction with its journal, verification and automatic rollback.
  - It runs on the controller (where ansible-playbook runs; C(pip install '.[fleet]') from a
    clone of patchkit) and
    starts patchkit's agent on the host over the host's connection, one command with the
    engine's sources and the request on its stdin; the host needs only Python 3.8+
    (C(ansible_python_interpreter), else the one Ansible's interpreter discovery finds). No
    module is copied to the host.
options:
  plan:
    description:
      - A file on the controller written by C(patchkit plan FIX... --json); read by the action
        plugin, never templated (patches may hold C({{)). Give this or O(request).
    type: path
  request:
    description: The engine request itself (the C(request) object of a plan).
    type: dict
  target:
    description:
      - The host's SGLang tree (the C(sglang) root). Default is the host variable C(patchkit_target).
    type: str
  roots:
    description:
      - "More roots by name, e.g. C({serve: /opt/serve}). Default is the host variable C(patchkit_roots)."
    type: dict
  python:
    description:
      - The interpreter the fixes' checks run with. Default is the host variable C(patchkit_python),
        else the one running the engine (C(ansible_python_interpreter)).
    type: str
  txn:
    description:
      - For an C(undo) request, the transaction to undo, as the change's result named it, e.g.
        C({{ patchkit_run.patchkit.txn }}), or as an undo's dry run named it (C(undoes)). Only
        the last apply, sync or rollback on the host can be undone; without O(txn), that one
        (C(patchkit plan --op undo --json) writes the request).
    type: str
notes:
  - Check mode runs the request as a dry run; diff mode returns each file's diff.
"""

EXAMPLES = r"""
- name: Apply the seed's three fixes (plan.json from patchkit plan FIX... --json)
  patchkit.fleet.engine:
    plan: plan.json
"""

RETURN = r"""
patchkit:
  description: The engine's result (docs/design.md, "Engine result").
  returned: always
  type: dict
python:
  description: The host's Python the engine ran with; patchkit's hooks run under it too.
  returned: always
  type: str
"""

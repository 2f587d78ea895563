#!/usr/bin/python
"""Ansible module: run patchkit's engine on the host (docs/fleet.md)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: engine
short_description: Apply, roll back, verify or report patchkit fixes on a host, all-or-nothing
description:
  - Runs patchkit's engine, the same code a local or C(ssh://) target runs, with a request
    rendered on the controller by C(patchkit plan FIX... --json): one call is one engine
    transaction with its journal, verification and automatic rollback.
  - The action plugin of the same name adds the engine's sources from the controller's patchkit
    (C(pip install 'patchkit[fleet]') where ansible-playbook runs); the host needs only Python 3.8+.
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
      - More roots by name, e.g. C({serve: /opt/serve}). Default is the host variable C(patchkit_roots).
    type: dict
  python:
    description:
      - The interpreter the fixes' checks run with. Default is the host variable C(patchkit_python),
        else the interpreter running this module.
    type: str
  engine:
    description: Set by the action plugin; do not give it.
    type: dict
    required: true
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
"""

import os
import signal

from ansible.module_utils.basic import AnsibleModule

CHANGED = {"applied", "upgraded", "rolled-back"}
WOULD_CHANGE = {"would-apply", "would-upgrade", "would-roll-back"}


def run_engine(engine, request):
    """Run the engine's sources from memory; stray output cannot reach Ansible's channel, and a
    dropped connection cannot stop a transaction halfway (the engine finishes or undoes it)."""
    namespace = {}
    exec(compile(engine["loader"], "<patchkit-loader>", "exec"), namespace)
    namespace["install"](engine["modules"])
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pipe = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.dup2(null, 1)
    try:
        return namespace["run"](request)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
        signal.signal(signal.SIGHUP, hup)
        signal.signal(signal.SIGPIPE, pipe)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            request=dict(type="dict", required=True),
            target=dict(type="str"),
            roots=dict(type="dict"),
            python=dict(type="str"),
            engine=dict(type="dict", required=True, no_log=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    request = dict(params["request"])
    roots = {str(k): str(v) for k, v in (params["roots"] or {}).items()}  # the host's, only
    if params["target"]:
        roots["sglang"] = params["target"]
    if not roots:
        module.fail_json(msg="no roots: set the host variable patchkit_target (the SGLang tree) "
                             "or give the module target/roots")
    request["roots"] = roots
    if params["python"]:
        request["python"] = params["python"]
    if module.check_mode:
        request["dry_run"] = True
    result = run_engine(params["engine"], request)
    fixes = result.get("fixes") or []
    outcomes = {f.get("outcome") for f in fixes}
    changed = bool(outcomes & (WOULD_CHANGE if request.get("dry_run") else CHANGED))
    out = {"changed": changed, "patchkit": result}
    if module._diff:
        out["diff"] = [{"before_header": "%s:%s" % (f.get("root"), f.get("path")),
                        "after_header": "%s:%s" % (f.get("root"), f.get("path")),
                        "prepared": f.get("diff") or ""}
                       for fix in fixes for f in fix.get("files") or () if f.get("diff")]
    if not result.get("ok"):
        error = result.get("error") or {}
        module.fail_json(msg=error.get("message") or "the patchkit engine failed", **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()

"""Action plugin of ``patchkit.fleet.engine``: runs on the controller, adds the engine's sources
from the patchkit installed there, and the host's roots from its variables (docs/fleet.md)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

HOST_VARS = {"target": "patchkit_target", "roots": "patchkit_roots", "python": "patchkit_python"}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        try:
            from patchkit.targets.transport import LOADER, engine_modules
        except ImportError as exc:
            raise AnsibleActionFail(
                "patchkit.fleet.engine needs patchkit on the controller (%s): install it where "
                "ansible-playbook runs, with pip install 'patchkit[fleet]'" % exc) from exc
        args = dict(self._task.args)
        if "engine" in args:
            raise AnsibleActionFail("patchkit.fleet.engine: 'engine' is set by the action plugin; remove it")
        plan = args.pop("plan", None)
        if plan is not None:  # read here, on the controller, and never templated
            if "request" in args:
                raise AnsibleActionFail("patchkit.fleet.engine: give 'plan' or 'request', not both")
            args["request"] = _read_plan(self._loader.path_dwim(str(plan)))
        if not isinstance(args.get("request"), dict):
            raise AnsibleActionFail("patchkit.fleet.engine: give 'plan', the file 'patchkit plan "
                                    "FIX... --json' wrote, or 'request', the request object in it")
        for arg, var in HOST_VARS.items():
            if args.get(arg) in (None, "") and task_vars.get(var) not in (None, ""):
                args[arg] = self._templar.template(task_vars[var])
        args["engine"] = {"loader": LOADER, "modules": engine_modules()}
        result.update(self._execute_module(module_name="patchkit.fleet.engine", module_args=args,
                                           task_vars=task_vars))
        return result


def _read_plan(path):
    import json

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise AnsibleActionFail("patchkit.fleet.engine: cannot read the plan %s: %s. Write it "
                                "with 'patchkit plan FIX... --json > FILE'" % (path, exc)) from exc
    request = doc.get("request") if isinstance(doc, dict) else None
    if not isinstance(request, dict):
        raise AnsibleActionFail("patchkit.fleet.engine: %s holds no 'request' object; write it with "
                                "'patchkit plan FIX... --json > FILE'" % path)
    return request

"""Action plugin ``patchkit.fleet.engine``: runs patchkit's engine on the host through the agent
an ``ssh://`` target starts (patchkit/targets/agent.py, spoken to through
patchkit/targets/protocol.py), over the host's Ansible connection: one command per host, the
engine's sources and the request on its stdin (docs/fleet.md).

It ships no Ansible module to the host: ``plugins/modules/engine.py`` is its documentation only,
as ``ansible.builtin.debug``'s is."""

from __future__ import annotations

import json

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

HOST_VARS = {"target": "patchkit_target", "roots": "patchkit_roots", "python": "patchkit_python"}
ARGS = {"plan", "request", "txn", *HOST_VARS}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        try:
            from patchkit.engine.contract import CHANGED, WOULD_CHANGE
            from patchkit.targets import protocol
        except ImportError as exc:
            raise AnsibleActionFail(
                "patchkit.fleet.engine needs patchkit on the controller (%s): install it where "
                "ansible-playbook runs, with pip install '.[fleet]' from a clone of patchkit"
                % exc) from exc
        args = dict(self._task.args)
        unknown = sorted(set(args) - ARGS)
        if unknown:
            raise AnsibleActionFail("patchkit.fleet.engine: unknown option(s) %s; it takes %s"
                                    % (", ".join(unknown), ", ".join(sorted(ARGS))))
        request = self._request(args, task_vars)
        python = result["python"] = self._interpreter(task_vars, result)
        data = protocol.agent_payload(request) + protocol.GO_LINE
        ran = self._low_level_execute_command(protocol.remote_command(python), sudoable=True,
                                              in_data=data)
        stdout = ran.get("stdout", "").encode("utf-8", "surrogateescape")
        engine = protocol.parse_result(stdout)
        if engine is None:  # the agent never answered: no Python, or it died (the journal knows)
            error = _no_result(protocol, task_vars, python, ran, stdout)
            result.update(failed=True, rc=ran.get("rc"), stderr=ran.get("stderr") or "",
                          msg=error.message)
            return result
        fixes = engine.get("fixes") or []
        outcomes = {f.get("outcome") for f in fixes}
        changing = WOULD_CHANGE if request.get("dry_run") else CHANGED
        result["changed"] = bool(outcomes & {o for names in changing.values() for o in names})
        result["patchkit"] = engine
        if self._task.diff:
            result["diff"] = [{"before_header": "%s:%s" % (f.get("root"), f.get("path")),
                               "after_header": "%s:%s" % (f.get("root"), f.get("path")),
                               "prepared": f.get("diff") or ""}
                              for fix in fixes for f in fix.get("files") or () if f.get("diff")]
        if not engine.get("ok"):
            error = engine.get("error") or {}
            result.update(failed=True, msg=error.get("message") or "the patchkit engine failed")
        return result

    def _request(self, args, task_vars):
        """The engine request: the plan's, with this host's roots, checks' interpreter and mode."""
        plan = args.get("plan")
        if plan is not None:  # read here, on the controller, and never templated
            if "request" in args:
                raise AnsibleActionFail("patchkit.fleet.engine: give 'plan' or 'request', not both")
            request = _read_plan(self._loader.path_dwim(str(plan)))
        else:
            request = args.get("request")
        if not isinstance(request, dict):
            raise AnsibleActionFail("patchkit.fleet.engine: give 'plan', the file 'patchkit plan "
                                    "FIX... --json' wrote, or 'request', the request object in it")
        request = dict(request)
        given = {arg: args.get(arg) for arg in HOST_VARS}
        for arg, var in HOST_VARS.items():
            if given[arg] in (None, "") and task_vars.get(var) not in (None, ""):
                given[arg] = self._templar.template(task_vars[var])
        roots = given["roots"] or {}
        if not isinstance(roots, dict):
            raise AnsibleActionFail("patchkit.fleet.engine: roots (patchkit_roots) must be a "
                                    "mapping of root names to paths, not %r" % (roots,))
        roots = {str(k): str(v) for k, v in roots.items()}  # the host's, only
        if given["target"]:
            roots["sglang"] = str(given["target"])
        if not roots:
            raise AnsibleActionFail("patchkit.fleet.engine: no roots: set the host variable "
                                    "patchkit_target (the SGLang tree) or give target/roots")
        request["roots"] = roots
        if given["python"]:
            request["python"] = str(given["python"])
        if args.get("txn"):  # an undo: the transaction the host's apply named (a template)
            request["txn"] = str(args["txn"])
        if self._task.check_mode:
            request["dry_run"] = True
        return request

    def _interpreter(self, task_vars, result):
        """The host's Python for the engine, as Ansible picks a module's: the host's
        ``ansible_python_interpreter`` (or ``interpreter_python``) when it names one, else the
        interpreter Ansible discovers there (kept as the host's ``discovered_interpreter_python``
        fact for later tasks, as a module's discovery is)."""
        from ansible import constants as C
        from ansible.executor.interpreter_discovery import discover_interpreter

        value = task_vars.get("ansible_python_interpreter")
        if value in (None, ""):
            value = C.config.get_config_value("INTERPRETER_PYTHON", variables=task_vars) or "auto"
        value = str(self._templar.template(value))
        if not value.startswith("auto"):
            return value
        found = (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")
        if not found:
            found = discover_interpreter(action=self, interpreter_name="python",
                                         discovery_mode=value, task_vars=task_vars)
            result.setdefault("ansible_facts", {})["discovered_interpreter_python"] = found
        return str(found)


def _no_result(protocol, task_vars, python, ran, stdout):
    """Why the agent gave no result, and whether anything may have run: the agent protocol's
    classification, as for an ``ssh://`` target. The payload and the go-ahead went together,
    so the go-ahead reached the agent once it said it held the payload."""
    where = str(task_vars.get("inventory_hostname") or "the host")
    details = {"host": where, "exit_code": ran.get("rc"), "stderr": ran.get("stderr") or ""}
    return protocol.classify_failure(
        details, where=where, python=python, stdout=stdout,
        went=protocol.READY_MARKER in stdout, status_command="patchkit status --inventory INV",
        python_advice="set ansible_python_interpreter")


def _read_plan(path):
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

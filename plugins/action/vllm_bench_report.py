"""Action vllm_bench_report: write the fleet report (plugins/plugin_utils/report.py) into a run's report folder.

On the controller, in the playbook's own Python: the report's code is the collection's, found the way Ansible
finds the collection (a checkout's collections/ folder or an installed ascend.fleet), so a controller needs no
other copy of it. Arguments: report_folder (holding raw/<host>/<instance>.jsonl) and latency_target_s.
Returns the report's summary and `line`, the line that tells the operator where the report is.
"""
from ansible.plugins.action import ActionBase

from ansible_collections.ascend.fleet.plugins.plugin_utils import report

ARGUMENT_SPEC = {
    "report_folder": {"type": "path", "required": True},
    "latency_target_s": {"type": "float", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    # A check run fetched no results to report on.
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            summary = report.build(args["report_folder"], args["latency_target_s"])
        except SystemExit as refused:  # the report's own message: what is wrong and the fix
            result.update(failed=True, msg=str(refused))
            return result
        except ImportError as missing:  # the charts' matplotlib, on a controller with ansible-core alone
            result.update(failed=True, msg="the fleet report needs %s on the controller (%s). Fix: pip install "
                                           "matplotlib (the version meta/ee-requirements.txt pins) into the Python "
                                           "that runs ansible-playbook" % (missing.name, missing))
            return result
        result.update(changed=True, summary=summary, line=report.describe(args["report_folder"], summary))
        return result

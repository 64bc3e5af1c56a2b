"""A collection module run as Ansible runs it on a host: its arguments in a file, its JSON result on stdout."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module_text(name, tmp_path, check=False, diff=False, **args):
    """(the module's stdout, its result) for plugins/modules/NAME.py run with `args` (check and diff mode as asked)."""
    argfile = tmp_path / ("%s-args.json" % name)
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check, _ansible_diff=diff)}))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", name + ".py"), str(argfile)],
                         stdout=subprocess.PIPE, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    return out.stdout, json.loads(out.stdout)


def run_module(name, tmp_path, check=False, diff=False, **args):
    """The result of plugins/modules/NAME.py run with `args`."""
    return run_module_text(name, tmp_path, check, diff, **args)[1]

"""tests/core_touch.py: which unit test files run under one ansible-core only (tests/unit/conftest.py)."""
import os
import subprocess
import sys

import pytest

from core_touch import touches_core

UNIT = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(UNIT))


def test_pure_python_files_are_free_and_anything_reaching_ansible_is_not():
    assert touches_core(os.path.join(UNIT, "test_dummy_hf_weights.py")) is None
    assert touches_core(os.path.join(UNIT, "test_host_requirements.py")) is None
    # through the collection's settings module, which imports ansible.module_utils
    assert "settings.py imports ansible." in touches_core(os.path.join(UNIT, "test_docs_examples.py"))
    assert "imports subprocess" in touches_core(os.path.join(UNIT, "test_settings_words.py"))


def test_a_helper_two_imports_away_makes_a_file_touch_ansible(tmp_path):
    (tmp_path / "deep.py").write_text("from ansible.module_utils.basic import AnsibleModule\n")
    (tmp_path / "middle.py").write_text("import json\nimport deep\n")
    (tmp_path / "test_a.py").write_text('"""Ansible in a docstring is words."""\nimport middle\nSYSTEM = "ansible"\n')
    assert touches_core(str(tmp_path / "test_a.py")) == "%s imports ansible.module_utils.basic" % os.path.relpath(
        str(tmp_path / "deep.py"), ROOT)
    (tmp_path / "test_c.py").write_text("import os\nimport re\nsystem = ['you', 'are']\nre.compile('x')\n")
    assert touches_core(str(tmp_path / "test_c.py")) is None


@pytest.mark.parametrize("source, reason", [
    ("import os\ndef test():\n    os.system('ansible-playbook x')\n", "calls system"),
    ("from os import system\nsystem('ansible-playbook x')\n", "calls system"),
    ("import os as o\no.execvp('ansible-playbook', [])\n", "calls execvp"),
    ("import pytest\npytest.importorskip('ansible.module_utils.basic')\n", "calls importorskip"),
    ("import runpy\n", "imports runpy"),
    ("import asyncio\n", "imports asyncio"),
    ("from . import helper\n", "relative: not followed"),
    ("exec(open('x.py').read())\n", "calls exec"),
])
def test_a_process_a_run_by_name_or_an_import_not_followed_touches_ansible(tmp_path, source, reason):
    (tmp_path / "test_x.py").write_text(source)
    assert reason in touches_core(str(tmp_path / "test_x.py"))


def test_a_conftest_above_the_file_counts(tmp_path):
    (tmp_path / "conftest.py").write_text("import pytest\nfrom ansible.template import Templar\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_y.py").write_text("def test():\n    assert True\n")
    assert "conftest.py imports ansible.template" in touches_core(str(tmp_path / "sub" / "test_y.py"), str(tmp_path))
    (tmp_path / "conftest.py").write_text("import pytest\n")
    assert touches_core(str(tmp_path / "sub" / "test_y.py"), str(tmp_path)) is None


def test_the_first_core_deselects_only_the_files_that_touch_no_ansible():
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
            os.path.join(UNIT, "test_host_requirements.py"), os.path.join(UNIT, "test_codes.py")]
    env = dict(os.environ, GPUSERVE_UNIT_TOUCHING_ANSIBLE="1")
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=ROOT, check=False).stdout
    assert "test_codes.py::" in out and "test_host_requirements.py::" not in out, out
    assert "touching no Ansible code, run under the newest ansible-core only: test_host_requirements.py" in out, out
    env.pop("GPUSERVE_UNIT_TOUCHING_ANSIBLE")  # the newest core's run: everything
    everything = subprocess.run(args, env=env, capture_output=True, text=True, cwd=ROOT, check=False).stdout
    assert "test_host_requirements.py::" in everything, everything

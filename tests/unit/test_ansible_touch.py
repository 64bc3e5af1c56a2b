"""tests/ansible_touch.py: which unit test files run under one ansible-core only (tests/unit/conftest.py)."""
import os
import subprocess
import sys

from ansible_touch import touches_ansible

UNIT = os.path.dirname(os.path.abspath(__file__))


def test_pure_python_files_are_free_and_anything_reaching_ansible_is_not():
    assert touches_ansible(os.path.join(UNIT, "test_dummy_hf_weights.py")) is None
    assert touches_ansible(os.path.join(UNIT, "test_host_requirements.py")) is None
    # through the collection's settings module, which imports ansible.module_utils
    assert "settings.py imports ansible." in touches_ansible(os.path.join(UNIT, "test_docs_examples.py"))
    assert "imports subprocess" in touches_ansible(os.path.join(UNIT, "test_settings_words.py"))


def test_a_helper_two_imports_away_or_a_process_makes_a_file_touch_ansible(tmp_path):
    (tmp_path / "deep.py").write_text("from ansible.module_utils.basic import AnsibleModule\n")
    (tmp_path / "middle.py").write_text("import json\nimport deep\n")
    (tmp_path / "test_a.py").write_text('"""Ansible in a docstring is words."""\nimport middle\nSYSTEM = "ansible"\n')
    assert touches_ansible(str(tmp_path / "test_a.py")) == "%s imports ansible.module_utils.basic" % os.path.relpath(
        str(tmp_path / "deep.py"), os.path.dirname(os.path.dirname(UNIT)))
    (tmp_path / "test_b.py").write_text("import os\nsystem = 1\n\ndef test():\n    os.system('ansible-playbook x')\n")
    assert "starts a process (os.system)" in touches_ansible(str(tmp_path / "test_b.py"))
    (tmp_path / "test_c.py").write_text("import os\nsystem = ['you', 'are']\n")
    assert touches_ansible(str(tmp_path / "test_c.py")) is None


def test_the_second_core_deselects_only_the_files_that_touch_no_ansible():
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
            os.path.join(UNIT, "test_host_requirements.py"), os.path.join(UNIT, "test_codes.py")]
    root = os.path.dirname(os.path.dirname(UNIT))
    env = dict(os.environ, GPUSERVE_UNIT_TOUCHING_ANSIBLE="1")
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=root, check=False).stdout
    assert "test_codes.py::" in out and "test_host_requirements.py::" not in out, out
    assert "touching no Ansible code, run under the first ansible-core only: test_host_requirements.py" in out, out
    env.pop("GPUSERVE_UNIT_TOUCHING_ANSIBLE")  # the first core's run: everything
    everything = subprocess.run(args, env=env, capture_output=True, text=True, cwd=root, check=False).stdout
    assert "test_host_requirements.py::" in everything, everything

"""wheelhouse_pack: the workstation's one-tar copy of a wheelhouse, as the host_venv role uses it."""
import os
import subprocess
import sys
import tarfile

from module_run import run_module


def run(tmp_path, **args):
    return run_module("wheelhouse_pack", tmp_path, check=args.pop("_check", False), **args)


def wheelhouse(tmp_path):
    src = tmp_path / "wheels"
    src.mkdir()
    for name in ("numpy-2.4.6-cp311-x86_64.whl", "attrs-26.1.0-py3-none-any.whl"):
        (src / name).write_bytes(name.encode() * 100)
    (src / "README").write_text("not a wheel\n")
    return src


def test_packs_the_wheels_in_name_order_once(tmp_path):
    src = wheelhouse(tmp_path)
    dest = tmp_path / "cache" / "wheelhouse-x.tar"
    first = run(tmp_path, src=str(src), dest=str(dest))
    assert first["changed"] and first["wheels"] == 2 and first["path"] == str(dest)
    with tarfile.open(str(dest)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["attrs-26.1.0-py3-none-any.whl", "numpy-2.4.6-cp311-x86_64.whl"]
        assert all(m.uid == 0 and m.mode == 0o644 for m in members)
        assert tar.extractfile(members[1]).read() == b"numpy-2.4.6-cp311-x86_64.whl" * 100
    assert [n for n in os.listdir(str(dest.parent)) if n.startswith(".")] == []  # no temporary file left
    again = run(tmp_path, src=str(src), dest=str(dest))
    assert again["changed"] is False and again["wheels"] == 2


def test_check_mode_says_it_would_pack_and_writes_nothing(tmp_path):
    dest = tmp_path / "cache" / "wheelhouse-x.tar"
    result = run(tmp_path, src=str(wheelhouse(tmp_path)), dest=str(dest), _check=True)
    assert result["changed"] and not dest.exists() and not dest.parent.exists()


def test_a_folder_without_wheels_is_e_venv_naming_it(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run(tmp_path, src=str(empty), dest=str(tmp_path / "w.tar"))
    assert result["failed"] and result["msg"].startswith("E_VENV: the wheelhouse %s holds no wheels" % empty)
    assert result["finding"]["code"] == "E_VENV" and "host_venv_wheelhouse" in result["finding"]["fix"]


def test_a_complete_virtualenv_answers_without_asking_the_python_that_would_make_one(tmp_path):
    """python_venv on every run of every host: a virtualenv that holds the pinned packages is reported as it is,
    the interpreter that makes one is asked only when something is missing (E_VENV then, naming it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    have = run_module("python_venv", tmp_path, path=str(tmp_path / "venv"), packages=[], python="/nonexistent/python3")
    assert not have.get("failed") and not have["changed"] and have["interpreter"] == str(tmp_path / "venv/bin/python")
    missing = run_module("python_venv", tmp_path, path=str(tmp_path / "venv"), packages=["attrs==26.1.0"], python="/nonexistent/python3")
    assert missing["failed"] and missing["msg"].startswith("E_VENV: /nonexistent/python3 cannot make a virtualenv"), missing


def test_what_a_virtualenv_holds_is_read_from_its_dist_info_folders_as_its_interpreter_reads_it(tmp_path):
    """The look on every run reads site-packages' NAME-VERSION.dist-info names, not the virtualenv's interpreter
    (~125 ms of CPU a host a run); where an .egg-info is there too, the interpreter is asked, with the same answer."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    for name, version in (("PyYAML", "6.0.4"), ("charset_normalizer", "3.5.2")):
        info = site / ("%s-%s.dist-info" % (name, version))
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    pinned = ["pyyaml==6.0.4", "charset-normalizer==3.5.2"]
    for fallback in (False, True):
        if fallback:  # a legacy install beside: the interpreter's importlib.metadata answers
            (site / "legacy-1.0.egg-info").write_text("Metadata-Version: 1.0\nName: legacy\nVersion: 1.0\n")
        held = run_module("python_venv", tmp_path, path=str(venv), packages=pinned, python="/nonexistent/python3")
        assert not held.get("failed") and not held["changed"], (fallback, held)
        other = run_module("python_venv", tmp_path, check=True, path=str(venv), packages=["pyyaml==6.0.3"],
                           python="/nonexistent/python3")
        assert other["failed"] and "cannot make a virtualenv" in other["msg"], (fallback, other)  # missing: a make

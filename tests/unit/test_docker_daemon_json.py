"""docker_daemon_json: daemon.json by merge, as the host stage uses it."""
import json
import os
import stat

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import daemon_json
from module_run import run_module

NVIDIA = {"path": "nvidia-container-runtime", "args": []}


def run(tmp_path, check=False, diff=False, **args):
    return run_module("docker_daemon_json", tmp_path, check, diff, **args)


def test_merge_keeps_foreign_keys_and_other_runtimes_and_adds_ours(tmp_path):
    path = tmp_path / "docker" / "daemon.json"
    path.parent.mkdir()
    path.write_text('{"log-driver": "journald", "runtimes": {"crun": {"path": "/usr/bin/crun"}},\n'
                    ' "registry-mirrors": ["https://mirror.example"]}')
    result = run(tmp_path, path=str(path), data_root="/data/docker")
    assert result["changed"] and not result["created"], result
    written = json.loads(path.read_text())
    assert written == {"log-driver": "journald",
                       "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": NVIDIA},
                       "registry-mirrors": ["https://mirror.example"],
                       "live-restore": True, "data-root": "/data/docker"}
    # The file's keys keep their order; new ones come after them.
    assert list(written) == ["log-driver", "runtimes", "registry-mirrors", "live-restore", "data-root"]
    assert [(c["key"], c["before"], c["after"], c["applies"]) for c in result["changes"]] == [
        ("runtimes.nvidia", None, NVIDIA, "reload"),
        ("live-restore", None, True, "reload"),
        ("data-root", None, "/data/docker", "restart")]
    assert result["apply"] == "restart"
    assert [n for n in os.listdir(str(path.parent)) if n != "daemon.json"] == []  # no temporary file left


def test_second_run_changes_nothing_and_leaves_the_admins_formatting(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"runtimes":{"nvidia":{"args":[],"path":"nvidia-container-runtime"}},"live-restore":true}')
    before = path.stat().st_mtime_ns, path.read_text()
    result = run(tmp_path, path=str(path))
    assert result["changed"] is False and result["changes"] == [] and result["apply"] == "none"
    assert (path.stat().st_mtime_ns, path.read_text()) == before


def test_a_missing_file_and_folder_are_made_as_nvidia_ctk_writes_the_runtime(tmp_path):
    path = tmp_path / "etc" / "docker" / "daemon.json"
    result = run(tmp_path, path=str(path))
    assert result["changed"] and result["created"] and result["apply"] == "reload"
    assert path.read_text() == ('{\n    "runtimes": {\n        "nvidia": {\n            "path": '
                                '"nvidia-container-runtime",\n            "args": []\n        }\n    },\n'
                                '    "live-restore": true\n}\n')
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert run(tmp_path, path=str(path))["changed"] is False


def test_cpu_host_leaves_runtimes_alone_and_live_restore_only_is_a_reload(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"runtimes": {"nvidia": {"path": "/opt/custom-runtime"}}}')
    result = run(tmp_path, path=str(path), nvidia_runtime=False)
    assert [c["key"] for c in result["changes"]] == ["live-restore"] and result["apply"] == "reload"
    assert json.loads(path.read_text())["runtimes"] == {"nvidia": {"path": "/opt/custom-runtime"}}


def test_an_nvidia_entry_written_otherwise_is_replaced_whole_as_nvidia_ctk_does(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},'
                    ' "live-restore": true}')
    result = run(tmp_path, path=str(path))
    assert result["changes"] == [{"key": "runtimes.nvidia", "applies": "reload", "after": NVIDIA,
                                  "before": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}]
    assert json.loads(path.read_text())["runtimes"]["nvidia"] == NVIDIA


def test_check_mode_with_diff_shows_the_keys_that_change_and_writes_nothing(tmp_path):
    path = tmp_path / "daemon.json"
    original = '{"log-opts": {"max-size": "10m"}, "live-restore": false}'
    path.write_text(original)
    result = run(tmp_path, check=True, diff=True, path=str(path))
    assert result["changed"] and path.read_text() == original
    diff = result["diff"]
    assert diff["before_header"] == diff["after_header"] == str(path)
    assert json.loads(diff["before"]) == {"log-opts": {"max-size": "10m"}, "live-restore": False}
    assert json.loads(diff["after"]) == {"log-opts": {"max-size": "10m"}, "live-restore": True, "runtimes": {
        "nvidia": NVIDIA}}
    # Rendered alike, the unchanged key's lines are the same on both sides.
    assert '    "log-opts": {\n        "max-size": "10m"\n    },\n' in diff["before"]
    assert '    "log-opts": {\n        "max-size": "10m"\n    },\n' in diff["after"]
    missing = run(tmp_path, check=True, diff=True, path=str(tmp_path / "none" / "daemon.json"))
    assert missing["created"] and missing["diff"]["before"] == "" and not (tmp_path / "none").exists()


@pytest.mark.parametrize("content, why", [
    ('{"live-restore": true,}', "it is not valid JSON: "),
    ('["live-restore"]', "it holds a JSON array, not an object"),
    ('{"debug": true, "debug": false}', 'the key "debug" appears twice in one object'),
    ('{"runtimes": "nvidia"}', 'its "runtimes" is a JSON str, not an object'),
    (b'{"labels": ["\xff"]}', "it is not UTF-8 text"),
])
def test_an_invalid_file_is_e_daemon_json_naming_it_and_never_overwritten(tmp_path, content, why):
    path = tmp_path / "daemon.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = path.read_bytes()
    result = run(tmp_path, path=str(path))
    assert result["failed"] and result["finding"]["code"] == "E_DAEMON_JSON", result
    assert result["msg"].startswith("E_DAEMON_JSON: the Docker daemon's configuration %s is left as it is: %s"
                                    % (path, why)), result["msg"]
    assert result["finding"]["subject"] == str(path) and "never overwrites" in result["finding"]["fix"]
    assert path.read_bytes() == before and sorted(os.listdir(str(tmp_path))) == ["daemon.json", "docker_daemon_json-args.json"]


def test_an_unreadable_file_is_e_daemon_json(tmp_path):
    path = tmp_path / "daemon.json"
    path.mkdir()  # a folder in its place: reading it fails for root too
    result = run(tmp_path, path=str(path))
    assert result["finding"]["code"] == "E_DAEMON_JSON" and "it cannot be read: Is a directory" in result["msg"]
    assert path.is_dir() and os.listdir(str(path)) == []


def test_an_empty_file_is_an_empty_configuration_as_dockerd_reads_it(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("\n")
    result = run(tmp_path, path=str(path), nvidia_runtime=False)
    assert result["changed"] and not result["created"] and json.loads(path.read_text()) == {"live-restore": True}


def test_mode_owner_and_a_symlink_are_kept(tmp_path):
    real = tmp_path / "managed" / "daemon.json"
    real.parent.mkdir()
    real.write_text("{}")
    os.chmod(str(real), 0o600)
    link = tmp_path / "daemon.json"
    link.symlink_to(real)
    run(tmp_path, path=str(link))
    assert link.is_symlink() and json.loads(real.read_text())["live-restore"] is True
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_data_root_written_another_way_is_no_change_and_a_relative_one_is_refused(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"data-root": "/data/docker/", "live-restore": true}')
    result = run(tmp_path, path=str(path), nvidia_runtime=False, data_root="/data//docker")
    assert result["changed"] is False
    bad = run(tmp_path, path=str(path), data_root="data/docker")
    assert bad["finding"]["code"] == "E_CONFIG"
    assert "data_root is 'data/docker'; allowed: an absolute path" in bad["msg"]


def test_settings_replace_their_keys_whole_and_say_what_applies_them(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"log-opts": {"max-size": "10m", "max-file": "3"}, "debug": false, "live-restore": false}')
    result = run(tmp_path, path=str(path), nvidia_runtime=False, live_restore=False,
                 settings={"log-opts": {"max-size": "50m"}, "debug": True, "storage-driver": "overlay2"})
    assert [(c["key"], c["applies"]) for c in result["changes"]] == [
        ("log-opts", "restart"), ("debug", "reload"), ("storage-driver", "restart")]
    assert json.loads(path.read_text()) == {"log-opts": {"max-size": "50m"}, "debug": True, "live-restore": False,
                                            "storage-driver": "overlay2"}
    refused = run(tmp_path, path=str(path), settings={"runtimes": {}})
    assert refused["finding"]["code"] == "E_CONFIG" and "settings names runtimes" in refused["msg"]


def test_proxy_credentials_are_masked_in_the_output_but_written(tmp_path):
    path = tmp_path / "daemon.json"
    proxies = {"http-proxy": "http://user:s3cret@proxy.example:3128", "no-proxy": "localhost"}
    result = run(tmp_path, diff=True, path=str(path), settings={"proxies": proxies})
    assert "s3cret" not in json.dumps(result)
    assert result["changes"][0]["after"]["http-proxy"] == "http://xxxxx:xxxxx@proxy.example:3128"
    assert json.loads(path.read_text())["proxies"] == proxies


def test_reloadable_keys_are_dockers_list_and_true_is_not_one():
    assert daemon_json.applies("runtimes.nvidia") == daemon_json.applies("live-restore") == "reload"
    assert daemon_json.applies("default-runtime") == daemon_json.applies("registry-mirrors") == "reload"
    for key in ("data-root", "storage-driver", "exec-opts", "cgroup-parent", "hosts", "proxies"):
        assert daemon_json.applies(key) == "restart", key
    new, changes = daemon_json.merge({"live-restore": 1}, live_restore=True)
    assert new == {"live-restore": True} and [c["before"] for c in changes] == [1]
    assert daemon_json.strongest([]) == "none"

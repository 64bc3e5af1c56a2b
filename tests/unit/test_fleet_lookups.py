"""Cross-host lookups in a fleet whose hosts differ (issue 38 item 1): the filters that group hosts by a
variable only some of them set, each host's variables read once; and the roles' own task files (the
weights seed, the autotune source, the image groups) run by ansible-playbook over a mixed fleet of local
hosts: burn-in and hub weights, two repos, an engine without tuning, two images."""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from jinja2 import Undefined

from ansible_collections.gpuserve.llm.plugins.filter.fleet import peers_by_key, prometheus_targets, values_by_host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CountingHostvars(dict):
    """hostvars as a plain mapping that counts how often each host's variables are read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads = {}

    def __getitem__(self, host):
        self.reads[host] = self.reads.get(host, 0) + 1
        return super().__getitem__(host)


FLEET = {
    "hub1": {"weights_repos_key": "k1", "autotune_plan": {"key": "t1", "ready": False}},
    "burnin": {"llm_weights": "dummy", "autotune_plan": {"skipped": True}},
    "hub2": {"weights_repos_key": "k1", "autotune_plan": {"key": "t1", "ready": True}},
    "other": {"weights_repos_key": "k2", "autotune_plan": "not a dict"},
    "failed": {"weights_repos_key": Undefined(name="weights_repos_key")},
}


def test_hosts_are_grouped_in_play_order_and_a_host_without_the_variable_is_in_no_group():
    hosts = ["hub1", "burnin", "hub2", "other", "failed", "not-in-inventory", "hub1"]
    assert peers_by_key(FLEET, hosts, "weights_repos_key") == {"k1": ["hub1", "hub2"], "k2": ["other"]}
    assert peers_by_key(FLEET, ["hub2", "hub1"], "weights_repos_key") == {"k1": ["hub2", "hub1"]}
    # A dotted path: a host whose plan was skipped, or is no mapping, has no key.
    assert peers_by_key(FLEET, hosts, "autotune_plan.key") == {"t1": ["hub1", "hub2"]}
    assert peers_by_key(FLEET, hosts, "autotune_plan.key", only="autotune_plan.ready") == {"t1": ["hub2"]}
    assert peers_by_key(FLEET, [], "weights_repos_key") == {} and peers_by_key(FLEET, None, "x") == {}


def test_a_value_that_is_not_a_string_is_keyed_by_its_json():
    fleet = {"a": {"repos": [{"id": "x"}]}, "b": {"repos": [{"id": "x"}]}, "c": {"repos": 3}}
    assert peers_by_key(fleet, ["a", "b", "c"], "repos") == {'[{"id": "x"}]': ["a", "b"], "3": ["c"]}


def test_values_by_host_keeps_the_hosts_that_have_the_variable():
    assert values_by_host(FLEET, ["other", "hub1", "burnin", "nowhere"], "weights_repos_key") == {"other": "k2", "hub1": "k1"}
    assert values_by_host(FLEET, ["hub2", "burnin"], "autotune_plan.ready") == {"hub2": True}
    assert list(values_by_host(FLEET, ["hub2", "hub1"], "weights_repos_key")) == ["hub2", "hub1"]


def _groups(targets):
    return {(g["labels"]["job"], g["labels"]["gpuserve_host"]): g for g in targets}


def test_prometheus_targets_a_limited_run_keeps_the_hosts_it_left_out_and_drops_those_gone_from_the_inventory():
    full = {"gpu1": {"llm_fleet_url": "http://10.0.0.1:18020", "llm_api_key": "k"},
            "gpu2": {"llm_fleet_url": "https://10.0.0.2:18020", "llm_api_key": ""},
            "gpu3": {"llm_fleet_url": "http://10.0.0.3:18020"},
            "r1": {"router_metrics_target": "10.0.0.9:29000"}}
    first = prometheus_targets(full, ["gpu1", "gpu2", "gpu3"], ["r1"], "")
    assert first[0] == {"targets": ["10.0.0.1:18020"],
                        "labels": {"job": "gpuserve-engines", "gpuserve_host": "gpu1", "gpuserve_api_key": "required"}}
    assert _groups(first)[("gpuserve-engines", "gpu2")]["targets"] == ["10.0.0.2:18020"]
    assert _groups(first)[("gpuserve-engines", "gpu2")]["labels"]["gpuserve_api_key"] == "none"
    assert _groups(first)[("gpuserve-router", "r1")] == {"targets": ["10.0.0.9:29000"],
                                                         "labels": {"job": "gpuserve-router", "gpuserve_host": "r1"}}
    # --limit gpu2,r1: gpu2 moved its port; gpu1 and gpu3 noted nothing this run and keep their groups; gpu3 has
    # left the inventory and is dropped.
    limited = {"gpu1": {"llm_api_key": "k"}, "gpu2": {"llm_fleet_url": "http://10.0.0.2:18021"},
               "r1": {"router_metrics_target": "10.0.0.9:29000"}}
    again = prometheus_targets(limited, ["gpu1", "gpu2"], ["r1"], json.dumps(first))
    assert [g["labels"]["gpuserve_host"] for g in again] == ["gpu1", "gpu2", "r1"]
    assert _groups(again)[("gpuserve-engines", "gpu1")] == first[0]
    assert _groups(again)[("gpuserve-engines", "gpu2")]["targets"] == ["10.0.0.2:18021"]
    # A router host that is also an engine host has a group for each job; a router the run left out keeps its own.
    both = prometheus_targets({"h": {"llm_fleet_url": "http://h:1"}}, ["h"], ["h", "r1"], json.dumps(first))
    assert sorted(_groups(both)) == [("gpuserve-engines", "h"), ("gpuserve-router", "r1")]


@pytest.mark.parametrize("previous", ["", "not json", "{}", '[{"targets": ["a:1", "b:2"], "labels": {"job": "x"}}]',
                                      '[{"targets": "a:1", "labels": {"gpuserve_host": "gpu1"}}]', "[3]"])
def test_prometheus_targets_a_file_of_another_format_is_rewritten_from_this_run_alone(previous):
    assert prometheus_targets({"gpu1": {}, "gpu2": {"llm_fleet_url": "http://b:2"}}, ["gpu1", "gpu2"], [], previous) == [
        {"targets": ["b:2"], "labels": {"job": "gpuserve-engines", "gpuserve_host": "gpu2", "gpuserve_api_key": "none"}}]


@pytest.mark.parametrize("size", [10, 1000])
def test_each_hosts_variables_are_read_once(size):
    """Linear: one read of each host's variables per call, however large the fleet."""
    fleet = CountingHostvars(("h%d" % i, {"k": "g%d" % (i % 3), "ok": i % 2 == 0}) for i in range(size))
    hosts = sorted(fleet)
    groups = peers_by_key(fleet, hosts, "k", only="ok")
    assert sum(len(g) for g in groups.values()) == size // 2
    assert set(fleet.reads.values()) == {1} and len(fleet.reads) == size
    fleet.reads.clear()
    assert len(values_by_host(fleet, hosts, "k")) == size and set(fleet.reads.values()) == {1}


# The roles' own task files over a mixed fleet of local hosts (no module runs: set_fact and fail only).
COMMON = dict(ansible_connection="local", ansible_python_interpreter=sys.executable, llm_engine="llamacpp",
              llm_model="acme/tiny-chat-GGUF", llm_model_revision="main", llm_drafter="off", llm_weights="hub")
HOSTS = {
    "hub1": {},
    "burnin": {"llm_weights": "dummy", "llm_model": "gpuserve/tiny-llama-dummy"},
    "hub2": {"weights_peer_address": "10.0.0.2", "weights_rsync_port": 18799},
    "other": {"llm_model": "acme/other-GGUF"},
}
PLAN = {"hub1": {"key": "t1", "ready": False}, "hub2": {"key": "t1", "ready": True}, "other": {"key": "t2", "ready": False}}
IMAGES = {"hub1": ("img:a", False), "burnin": ("img:b", True), "hub2": ("img:a", True), "other": ("img:a", False)}


def run_play(tmp_path, plays, hostvars=None, extra=()):
    inventory = {"all": {"hosts": dict((h, dict(COMMON, **v, **(hostvars or {}).get(h, {}))) for h, v in HOSTS.items())}}
    return run_playbook(tmp_path, inventory, plays, extra)


def run_playbook(tmp_path, inventory, plays, extra=()):
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_RETRY_FILES_ENABLED="0")
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                          str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")] + list(extra),
                         cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         check=False, timeout=300)
    return out


def said(output):
    """{host: what its last 'Say' task printed (a JSON object)}."""
    found = {}
    for host, msg in re.findall(r'ok: \[([^\]]+)\] => \{\s*"msg": (".*?[^\\]")\s*\}', output, re.S):
        found[host] = json.loads(json.loads(msg))
    return found


def say(expression):
    return {"name": "Say", "ansible.builtin.debug": {"msg": "{{ %s | to_json }}" % expression}}


def test_the_weights_seed_of_a_fleet_mixing_burn_in_and_hub_weights_and_two_repos(tmp_path):
    """The reported failure: a host of the play with burn-in weights never notes repos; the hub hosts
    still choose their seed, the first host serving the same repos."""
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "The seed on the hub hosts", "ansible.builtin.include_role": {
            "name": "gpuserve.llm.weights", "tasks_from": "seed"}, "when": "llm_weights == 'hub'"},
        say("{'seed': weights_seed | default(''), 'serve_at': weights_serve_at | default({})}")]}]
    out = run_play(tmp_path, plays)
    assert out.returncode == 0, out.stdout
    got = said(out.stdout)
    assert dict((h, s["seed"]) for h, s in got.items()) == {"hub1": "hub1", "burnin": "", "hub2": "hub1", "other": "other"}
    # where its peers reach it, from its own defaults or inventory (hostvars has no role defaults)
    assert got["hub1"]["serve_at"] == {"address": "hub1", "port": 8730}
    assert got["hub2"]["serve_at"] == {"address": "10.0.0.2", "port": 18799}
    assert "HostVarsVars" not in out.stdout


def test_a_seed_named_that_cannot_serve_the_host_is_e_config(tmp_path):
    """weights_seed_host naming a host with burn-in weights, one serving other repos, one not in the run."""
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "The seed on the hub hosts", "ansible.builtin.include_role": {
            "name": "gpuserve.llm.weights", "tasks_from": "seed"}, "when": "llm_weights == 'hub'"}]}]
    named = {"hub1": "other", "hub2": "burnin", "other": "elsewhere"}
    out = run_play(tmp_path, plays, hostvars=dict((h, {"weights_seed_host": s}) for h, s in named.items()))
    assert out.returncode != 0
    for host, seed, why, serves in (
            ("hub1", "other", "serves other repos, revisions or files (acme/other-GGUF)", "acme/tiny-chat-GGUF"),
            ("hub2", "burnin", "fetches no weights from the hub in this run", "acme/tiny-chat-GGUF"),
            ("other", "elsewhere", "is not in this run (left out by --limit, or it failed earlier)", "acme/other-GGUF")):
        assert ("E_CONFIG [error] %s weights_seed_host: weights_seed_host is %s, which %s; %s serves %s: name a host "
                "of this run serving the same repos" % (host, seed, why, host, serves)) in out.stdout, out.stdout
        assert "failed=1" in re.search(r"\n%s\s+:.*" % host, out.stdout).group(0)
    assert "failed=0" in re.search(r"\nburnin\s+:.*", out.stdout).group(0)


@pytest.mark.parametrize("force, expected", [
    (False, {"hub1": "hub2", "hub2": "hub2", "other": "other", "burnin": ""}),
    (True, {"hub1": "hub1", "hub2": "hub1", "other": "other", "burnin": ""}),
])
def test_the_autotune_source_when_one_engine_does_not_tune(tmp_path, force, expected):
    """burnin's engine tunes nothing (its plan skipped): the others take the first ready result of their key."""
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "The plan", "ansible.builtin.set_fact": {"autotune_plan": "{{ plan[inventory_hostname] }}"},
         "vars": {"plan": PLAN}, "when": "inventory_hostname in plan"},
        {"name": "The source", "ansible.builtin.include_role": {"name": "gpuserve.llm.autotune", "tasks_from": "source"},
         "vars": {"autotune_force": force, "autotune_llamacpp": "{{ inventory_hostname != 'burnin' }}"}},
        say("autotune_source | default('')")]}]
    out = run_play(tmp_path, plays)
    assert out.returncode == 0, out.stdout
    assert said(out.stdout) == expected


def test_the_image_groups_of_a_fleet_mixing_images(tmp_path):
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "What each host has", "ansible.builtin.set_fact": {
            "image_ref": "{{ images[inventory_hostname][0] }}",
            "image_present": {"images": "{{ [{'Id': 'x'}] if images[inventory_hostname][1] else [] }}"}},
         "vars": {"images": IMAGES}},
        {"name": "The groups", "ansible.builtin.include_role": {"name": "gpuserve.llm.image", "tasks_from": "group"}},
        say("{'all': image_hosts_by_ref, 'have': image_holders_by_ref}")]}]
    out = run_play(tmp_path, plays)
    assert out.returncode == 0, out.stdout
    got = said(out.stdout)
    assert got["hub1"] == got["burnin"] == {"all": {"img:a": ["hub1", "hub2", "other"], "img:b": ["burnin"]},
                                            "have": {"img:a": ["hub2"], "img:b": ["burnin"]}}


@pytest.mark.parametrize("fleet, extra, expected", [
    ({"a": {}, "b": {}}, (), {"image": 4, "video": 1}),  # the llm role's defaults: vLLM, with vision
    ({"a": {}, "b": {"llm_engine": "sglang"}}, (), {"image": 4, "video": 0}),
    ({"a": {"llm_engine": "llamacpp"}, "b": {"llm_vision": "false"}}, (), {"image": 0, "video": 0}),
    ({"a": {}, "b": {"llm_engine": "nonesuch"}}, (), {"image": 4, "video": 1}),  # refused at its own validation
    ({"a": {}, "b": {}}, ("-e", "llm_vision=false"), {"image": 0, "video": 0}),
])
def test_the_fleets_front_lets_through_the_fewest_media_any_host_takes(tmp_path, fleet, extra, expected):
    """The router sends to the engines, not to their hosts' fronts, and SGLang and llama.cpp count no media: the
    fleet's front takes what the least of them takes, each host's engine and llm_vision from its inventory or the
    llm role's defaults (hostvars has none), read on a host that sets its own."""
    hosts = dict((h, dict(ansible_connection="local", ansible_python_interpreter=sys.executable, **v))
                 for h, v in fleet.items())
    hosts["router"] = dict(ansible_connection="local", ansible_python_interpreter=sys.executable, llm_engine="vllm",
                           llm_vision=True)
    inventory = {"all": {"hosts": hosts, "children": {"llm_hosts": {"hosts": dict((h, None) for h in fleet)}}}}
    plays = [{"hosts": "router", "gather_facts": False, "tasks": [
        {"name": "The front role's defaults", "ansible.builtin.include_vars": {
            "file": os.path.join(ROOT, "roles", "front", "defaults", "main.yml")}},
        say("front_fleet_media")]}]
    out = run_playbook(tmp_path, inventory, plays, extra)
    assert out.returncode == 0, out.stdout
    assert said(out.stdout) == {"router": expected}

"""The router stage's pieces that need no router: its command line against vllm-router 0.1.17's help
(its front: test_front.py), the engines' running-request counts the drain waits on, the fleet URL, and
the settings rules (a policy the router lacks, a router host whose ports collide)."""
import json
import os
import re

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.filter.engines import fleet_url, router_command
from ansible_collections.gpuserve.llm.plugins.module_utils import engines
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs, validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = load_specs(ROOT)
with open(os.path.join(ROOT, "roles", "router", "defaults", "main.yml")) as f:
    ROUTER = dict((k, v) for k, v in yaml.safe_load(f).items() if "{{" not in str(v))
with open(os.path.join(ROOT, "tests", "fixtures", "vllm-router-0.1.17-help.txt")) as f:
    HELP = f.read()
with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    LLM = yaml.safe_load(f)


def test_the_router_listens_on_loopback_only_with_the_workers_it_is_given():
    argv = router_command(ROUTER, ["http://10.0.0.5:8020", "http://10.0.0.6:8020"])
    assert argv[:2] == ["python3", "/opt/vllm-router/launch.py"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # its admin endpoints have no authentication
    assert argv[argv.index("--port") + 1] == str(ROUTER["router_admin_port"])
    assert argv[argv.index("--policy") + 1] == "cache_aware"
    assert argv[argv.index("--worker-urls") + 1:] == ["http://10.0.0.5:8020", "http://10.0.0.6:8020"]
    assert "--api-key" not in argv  # the client's header goes through; the engines check it
    assert "--worker-urls" not in router_command(ROUTER, [])


def test_every_router_flag_and_policy_is_in_vllm_router_0_1_17_help():
    argv = router_command(dict(ROUTER, router_policy="round_robin"), ["http://10.0.0.5:8020"])
    flags = set(re.findall(r"(--[a-z][a-z0-9-]+)", HELP))
    assert [a for a in argv if a.startswith("--") and a not in flags] == []
    known = re.search(r"--policy \{([^}]+)\}", HELP).group(1).split(",")
    assert set(SPECS.options["router_policy"]["choices"]) <= set(known)


@pytest.mark.parametrize("engine, text, running", [
    # The requests an engine holds: those running and those queued (llama.cpp's deferred wait for a slot,
    # which /slots does not show: it is not read).
    ("llamacpp", "llamacpp:requests_processing 2\nllamacpp:requests_deferred 6\n", 8),
    ("llamacpp", "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n", 0),
    ("llamacpp", json.dumps([{"id": 0, "is_processing": True}]), None),
    ("vllm", 'vllm:num_requests_running{engine="0",model_name="m"} 3.0\nvllm:num_requests_waiting{} 1\n', 4),
    ("sglang", "sglang:num_running_reqs{model_name=\"m\"} 0.0\n", 0),
    ("sglang", "sglang:num_running_reqs{model_name=\"m\"} 1.0\nsglang:num_queue_reqs{model_name=\"m\"} 2.0\n", 3),
    ("vllm", "other_metric 1\n", None),
    ("llamacpp", "not metrics", None),
])
def test_the_drain_reads_each_engines_running_requests(engine, text, running):
    assert engines.running_requests(engine, text) == running


def test_a_router_reaches_an_engine_at_its_bind_or_at_the_hosts_address():
    assert fleet_url(8020, "10.0.0.5", "gpu1") == "http://10.0.0.5:8020"
    assert fleet_url(8020, "0.0.0.0", "gpu1.example") == "http://gpu1.example:8020"
    assert fleet_url(8020, "::", "fd00::5") == "http://[fd00::5]:8020"
    assert fleet_url(8020, "0.0.0.0", "gpu1.example", True) == "https://gpu1.example:8020"  # a front with llm_tls


def _findings(groups, **settings):
    given = dict(LLM, llm_context=LLM["llm_model_max_context"], llm_model_dense="fp8", llm_engine_port=18020)
    given.update(settings)
    return [f for f in validate(given, SPECS.options, SPECS.internal, groups)[0] if f["severity"] == "error"]


def test_a_policy_the_router_lacks_is_refused_naming_the_choices():
    [found] = _findings(["llm_routers"], router_policy="least_busy")
    assert found["code"] == "E_CONFIG" and found["subject"] == "router_policy"
    assert "one of cache_aware, round_robin" in found["message"]


def test_a_router_host_that_is_a_worker_on_the_same_port_is_refused():
    [found] = _findings(["llm_hosts", "llm_routers"], llm_port=8000, router_port=8000)
    assert found["code"] == "E_CONFIG" and found["subject"] == "router_port"
    assert "a router (llm_routers) and a worker (llm_hosts) on the same port: router_port and llm_port are both 8000" \
        in found["message"]
    [admin] = _findings(["llm_hosts", "llm_routers"], llm_port=8001)  # the router's own port, by its default
    assert admin["subject"] == "router_admin_port"
    assert _findings(["llm_hosts"], llm_port=8000) == []  # no router here
    assert _findings(["llm_hosts", "llm_routers"], llm_port=8020) == []
    [engine] = _findings(["llm_hosts", "llm_routers"], llm_engine_port=8002)  # the engine's own port clashes too
    assert engine["subject"] == "router_metrics_port" and "router_metrics_port and llm_engine_port are both 8002" \
        in engine["message"]
    [same] = _findings(["llm_routers"], router_port=9000, router_metrics_port=9000)
    assert "a router host needs three different ports" in same["message"]

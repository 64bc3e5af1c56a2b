"""The front (roles/front, templates/front.conf.j2): what it lets through is an exact allow-list, what it sends
upstream is the route's own path with the internal key, and it holds digests of the client keys, never a key.
Its behaviour against real requests is tested through a real nginx: the plays' fronts in the playbook tests
(test_host_play), the body check before a vision engine in test_weights_play (tests/front_alone.py)."""
import hashlib
import json
import os
import re
import stat

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils import engines
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs, validate
from front_alone import CLIENTS, render
from module_run import run_module_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = load_specs(ROOT)
with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    LLM = {k: v for k, v in yaml.safe_load(f).items() if "{{" not in str(v)}
LLM.update(llm_context=LLM["llm_model_max_context"], llm_model_dense="fp8", llm_engine_port=18020)


def locations(conf):
    return dict(re.findall(r"\n        location (= \S+|/|@\w+) \{\n(.*?)\n        \}(?=\n)", conf, re.S))


def test_only_the_engines_openai_routes_and_health_are_forwarded_each_to_its_own_path():
    found = locations(render())
    proxied = sorted(k for k, v in found.items() if "proxy_pass" in v)
    assert proxied == ["= /health", "= /v1/models", "@upstream"]
    # A POST route's body is read and checked (front_media.js) before it goes on, by an internal redirect
    # to @upstream, which sends the route's own path that the route's location set.
    checked = sorted(k for k, v in found.items() if "js_content front_media.check;" in v)
    assert checked == ["= /v1/chat/completions", "= /v1/completions", "= /v1/responses"]
    for name in checked + ["= /health", "= /v1/models"]:
        path = name[2:]
        # The upstream gets the route's fixed path (a variable: no client URI, no query string appended).
        assert "set $gpuserve_path %s;" % path in found[name]
    for name in ["= /health", "= /v1/models", "@upstream"]:
        assert "proxy_pass http://gpuserve_upstream$gpuserve_path;" in found[name]
    assert "proxy_buffering off;" in found["@upstream"] and "proxy_set_header Authorization $gpuserve_upstream_auth;" in \
        found["@upstream"]
    assert "return 404" in found["/"] and "proxy_pass" not in found["/"]
    # HEAD where GET is allowed goes on as GET (FastAPI's GET routes answer HEAD 405); a POST goes on as a POST.
    assert ["proxy_method GET;" in found[n] for n in ("= /health", "= /v1/models", "@upstream")] == [True, True, False]
    assert "POST" in found["= /v1/chat/completions"] and "return 405" in found["= /v1/chat/completions"]
    # llama-server 0.7.0 serves no Responses API: its front does not forward one.
    assert "= /v1/responses" not in locations(render(front_routes=engines.PROFILES["llamacpp"]["front_routes"]))
    assert "set $gpuserve_path /readiness;" in locations(render(front_health_path="/readiness"))["= /health"]


def test_a_front_on_all_addresses_of_both_families_takes_ipv4_too():
    # router_bind or llm_host "::": nginx listens on IPv6 alone there unless told, and router_vip is IPv4.
    for tls in (False, True):
        assert "listen [::]:8000 ipv6only=off%s;" % (" ssl" if tls else "") in render(front_listen="[::]:8000", llm_tls=tls)
        assert "listen 0.0.0.0:8000%s;" % (" ssl" if tls else "") in render(front_listen="0.0.0.0:8000", llm_tls=tls)
    assert "listen [fd00::5]:8000;" in render(front_listen="[fd00::5]:8000")


def test_the_body_check_gets_the_item_cap_and_the_engines_media_counts():
    conf = render(front_media_item_mib=3, front_media={"image": 4, "video": 0},
                  front_media_why="llamacpp takes at most 4 images and no video a request",
                  front_media_urls="example.com media.example.org")
    assert 'set $gpuserve_media_urls "example.com media.example.org";' in conf
    assert "set $gpuserve_media_item_bytes 3145728;" in conf
    assert "set $gpuserve_media_images 4;" in conf and "set $gpuserve_media_videos 0;" in conf
    assert 'set $gpuserve_media_why "llamacpp takes at most 4 images and no video a request";' in conf
    assert "js_import front_media.js;" in conf
    # vLLM's own limit is the profile's: the engine and its front count the same
    with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
        assert "--limit-mm-per-prompt {{ media_per_request | json }}" in f.read()
    # the fleet's front: tests/unit/test_fleet_lookups.py (the fewest any host takes)


def test_a_client_key_is_checked_by_its_digest_and_replaced_by_the_internal_key():
    conf = render()
    for name, key in CLIENTS.items():
        assert key not in conf
        assert '"%s" "%s";' % (hashlib.sha256(key.encode()).hexdigest(), name) in conf
    route = locations(conf)["= /v1/chat/completions"]
    assert 'if ($gpuserve_client = "") {\n                return 401' in route
    # the key is checked in the route's location, before its body is read; what goes upstream has the internal key
    assert route.index("return 401") < route.index("js_content")
    assert "proxy_set_header Authorization $gpuserve_upstream_auth;" in locations(conf)["@upstream"]
    assert "env GPUSERVE_UPSTREAM_KEY;" in conf  # the internal key comes from the container's environment
    # No client keys: nobody is asked (the map's default is a name), and limits count per address.
    assert 'default "-";' in render(front_clients={}) and 'default "";' not in render(front_clients={})


def test_the_limits_are_the_settings():
    conf = render(front_body_max_kib=300, front_rate_per_key=7, front_rate_burst=3, front_connections_per_key=5,
                  front_connections_per_address=9, front_retry_after=2)
    assert "client_max_body_size 300k;" in conf and "rate=7r/s;" in conf
    route = locations(conf)["= /v1/completions"]
    assert "limit_req zone=gpuserve_rate burst=3 nodelay;" in route
    assert "limit_conn gpuserve_key_conn 5;" in route and "limit_conn gpuserve_addr_conn 9;" in route
    assert "add_header Retry-After 2 always;" in locations(conf)["@too_many"]
    assert "listen [fd00::7]:9000;" in render(front_listen="[fd00::7]:9000")
    # An engine that does not answer (starting, rolled) is a 503 to the client, not nginx's 502.
    assert "error_page 502 503 504 =503 @unavailable;" in conf
    # Idle upstream connections end at the front (4 s) before the engine's keep-alive (5 s) closes one under a POST.
    upstream = re.search(r"upstream gpuserve_upstream \{(.*?)\}", conf, re.S).group(1)
    assert "keepalive 32;" in upstream and "keepalive_timeout 4s;" in upstream


def test_with_tls_the_front_serves_https_only_and_says_so_to_plain_http():
    plain, tls = render(), render(llm_tls=True)
    assert "listen 0.0.0.0:8020;" in plain and "ssl" not in plain and "@plain_http" not in plain
    assert "listen 0.0.0.0:8020 ssl;" in tls and "listen 0.0.0.0:8020;" not in tls
    assert "ssl_certificate /etc/gpuserve/front.crt;" in tls and "ssl_certificate_key /etc/gpuserve/front.key;" in tls
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in tls
    # nginx answers plain HTTP on an ssl port with its own code 497: refused with a word, never redirected.
    assert "error_page 497 =400 @plain_http;" in tls
    assert "use https://" in locations(tls)["@plain_http"] and "return 400" in locations(tls)["@plain_http"]
    # The allow-list and the limits are the same either way.
    assert set(locations(tls)) - {"@plain_http"} == set(locations(plain))


def errors(**settings):
    given = dict(LLM, **settings)
    return [f for f in validate(given, SPECS.options, SPECS.internal)[0] if f["severity"] == "error"]


@pytest.mark.parametrize("name, value", [
    ("llm_api_key", "sk-internal-key\n"), ("llm_api_key", " sk-internal-key"), ("llm_api_key", "sk-in\x00ternal"),
    ("llm_hf_token", "hf_abc\t"), ("llm_hf_token", "hf_abc\u2028def"),
    ("llm_client_keys", {"alice": "sk-alice-0123456789abcdef\r\n"}),
])
def test_a_secret_with_a_control_character_or_white_space_around_it_is_refused_never_shown(name, value):
    [found] = errors(**{name: value})
    assert found["code"] == "E_CONFIG" and found["subject"].startswith(name)
    assert "(its value is not shown)" in found["message"]
    secret = value if isinstance(value, str) else list(value.values())[0]
    assert secret.strip() not in repr(found)


@pytest.mark.parametrize("keys, says", [
    ({"alice": "short"}, "the key of 'alice' is not 16 to 512 printable ASCII characters"),
    ({"al ice": "sk-alice-0123456789abcdef"}, "the client name 'al ice' is not"),
    ({"a": "sk-same-0123456789abcdef", "b": "sk-same-0123456789abcdef"}, "two clients share one key"),
    ({"a": "sk-internal-0123456789abcdef"}, "a client key is llm_api_key"),
])
def test_client_keys_are_named_long_and_each_their_own(keys, says):
    [found] = errors(llm_client_keys=keys, llm_api_key="sk-internal-0123456789abcdef")
    assert found["code"] == "E_CONFIG" and found["subject"] == "llm_client_keys" and says in found["message"]
    assert "0123456789abcdef" not in found["message"]
    assert errors(llm_client_keys=CLIENTS, llm_api_key="sk-internal-0123456789abcdef") == []


@pytest.mark.parametrize("host, public, refused", [
    ("127.0.0.1", False, False), ("10.1.2.3", False, False), ("fd00::5", False, False), ("::1", False, False),
    ("0.0.0.0", False, True), ("::", False, True), ("1.2.3.4", False, True), ("0.0.0.0", True, False),
])
def test_the_engine_binds_to_loopback_or_a_private_address_unless_published_on_purpose(host, public, refused):
    found = errors(llm_engine_host=host, llm_engine_public=public)
    assert [f["subject"] for f in found] == (["llm_engine_host"] if refused else [])
    if refused:
        assert "llm_engine_public: true" in found[0]["message"]
    [same] = errors(llm_engine_port=LLM["llm_port"])
    assert same["subject"] == "llm_engine_port"


def test_a_published_engine_is_a_warning_in_the_findings_preflight_reports():
    found = validate(dict(LLM, llm_engine_host="0.0.0.0", llm_engine_public=True), SPECS.options, SPECS.internal)[0]
    assert [(f["code"], f["severity"], f["subject"]) for f in found] == [("W_ENGINE_PUBLIC", "warning", "llm_engine_host")]


@pytest.mark.parametrize("settings, subject, says", [
    (dict(llm_tls_cert_file="/etc/ssl/front.pem"), "llm_tls_key_file", "llm_tls_cert_file is set but llm_tls_key_file"),
    (dict(llm_tls_key_file="/etc/ssl/front.key"), "llm_tls_cert_file", "llm_tls_key_file is set but llm_tls_cert_file"),
    (dict(llm_tls_names=["api.example.com", "bad name", "-x.example"]), "llm_tls_names", "['bad name', '-x.example']"),
])
def test_a_certificate_comes_with_its_key_and_the_names_are_names_or_addresses(settings, subject, says):
    [found] = errors(llm_tls=True, **settings)
    assert found["code"] == "E_CONFIG" and found["subject"] == subject and says in found["message"], found
    assert errors(llm_tls=True, llm_tls_cert_file="/etc/ssl/f.pem", llm_tls_key_file="/etc/ssl/f.key",
                  llm_tls_names=["*.example.com", "api.example.com", "10.0.0.9", "fd00::9"]) == []


def test_a_routers_front_lets_only_its_peers_ask_with_the_internal_key_for_its_workers():
    assert "/gpuserve/router-workers" not in render()  # a host's front, or a router without router_vip
    found = locations(render(front_stage="router", front_peers=["10.0.0.6", "fd00::7"]))
    route = found["= /gpuserve/router-workers"]
    # the key check (rewrite phase) first: anyone without the internal key gets the 404 every unknown path gets
    assert route.index('if ($gpuserve_peer != "1")') < route.index("allow 10.0.0.6;") < route.index("deny all;")
    assert "allow fd00::7;" in route and "return 404" in route
    # nothing goes upstream: the file the router host's check writes, read by nginx's worker in the front's folder
    assert "alias /etc/gpuserve/router-workers.json;" in route and "proxy_pass" not in route
    with open(os.path.join(ROOT, "roles", "front", "files", "front_auth.js")) as f:
        script = f.read()
    assert "function peer(r)" in script and "crypto.createHmac('sha256', key).update(PEERS)" in script


# The front's folder and files in one call (plugins/modules/front_files.py), run as Ansible runs it.
KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg-k3yM4terial\n-----END PRIVATE KEY-----\n"


def front_files(tmp_path, check=False, diff=False, **args):
    return run_module_text("front_files", tmp_path, check, diff, **args)


def test_the_front_files_are_written_once_with_their_modes_and_the_key_is_never_shown(tmp_path):
    folder, ca = tmp_path / "front" / "gpuserve-llm-front", tmp_path / "tls" / "ca.crt"
    files = [{"path": "front.conf", "content": "events {}\n", "mode": "0600"},
             {"path": "front_auth.js", "content": "export default {};\n"},
             {"path": "front.key", "secret_content": KEY, "mode": "0600"},
             {"path": str(ca), "content": "CA\n"}]
    # Check mode: what would be written, nothing written.
    text, would = front_files(tmp_path, check=True, diff=True, folder=str(folder), files=files)
    assert would["changed"] and would["folder_changed"] and not folder.exists() and not ca.exists(), would
    assert would["written"] == [str(folder / "front.conf"), str(folder / "front_auth.js"), str(folder / "front.key"),
                                str(ca)]
    text, made = front_files(tmp_path, diff=True, folder=str(folder), files=files)
    assert made["changed"] and made["written"] == would["written"], made
    assert (folder / "front.conf").read_text() == "events {}\n" and (folder / "front.key").read_text() == KEY
    assert ca.read_text() == "CA\n"
    modes = dict((p.name, stat.S_IMODE(p.stat().st_mode)) for p in [folder, folder / "front.conf",
                                                                    folder / "front_auth.js", folder / "front.key", ca])
    assert modes == {"gpuserve-llm-front": 0o700, "front.conf": 0o600, "front_auth.js": 0o644, "front.key": 0o600,
                     "ca.crt": 0o644}
    # The diff shows the configuration's text, never the key's; the arguments shown carry sizes and digests.
    assert [d["after"] for d in made["diff"]][:1] == ["events {}\n"]
    assert "k3yM4terial" not in text and "BEGIN PRIVATE KEY" not in text, text
    # (ansible-core 2.21 returns no invocation unless inject_invocation is set; 2.19 returns the module's own)
    shown = made.get("invocation", {"module_args": {"files": [{"content": "10 bytes, sha256 x"}]}})
    assert shown["module_args"]["files"][0]["content"].startswith("10 bytes, sha256 "), shown
    assert "events {}" not in json.dumps(shown), shown
    # A second run changes nothing and touches nothing.
    before = dict((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
    text, again = front_files(tmp_path, folder=str(folder), files=files)
    assert not again["changed"] and again["written"] == [] and not again["folder_changed"], again
    assert before == dict((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
    assert sorted(os.listdir(str(folder))) == ["front.conf", "front.key", "front_auth.js"]  # no temporary file left


def test_a_changed_file_a_changed_mode_and_files_no_longer_used_are_what_changes(tmp_path):
    folder = tmp_path / "f"
    files = [{"path": "front.conf", "content": "a\n", "mode": "0600"}, {"path": "front.crt", "content": "C\n"},
             {"path": "front.key", "secret_content": KEY, "mode": "0600"}]
    front_files(tmp_path, folder=str(folder), files=files)
    (folder / "front.key").write_text("another key\n")
    os.chmod(str(folder / "front.crt"), 0o666)
    text, changed = front_files(tmp_path, diff=True, folder=str(folder), files=files[1:] + [
        {"path": "front.conf", "content": "b\n", "mode": "0600"}], folder_mode="0711")
    assert changed["written"] == [str(folder / n) for n in ("front.crt", "front.key", "front.conf")], changed
    assert changed["folder_changed"] and stat.S_IMODE(folder.stat().st_mode) == 0o711
    assert stat.S_IMODE((folder / "front.crt").stat().st_mode) == 0o644 and (folder / "front.key").read_text() == KEY
    assert "another key" not in text and "k3yM4terial" not in text, text
    # llm_tls turned off: the certificate and key go, the configuration stays.
    text, off = front_files(tmp_path, folder=str(folder), folder_mode="0711",
                            files=[{"path": "front.conf", "content": "b\n", "mode": "0600"}],
                            absent=["front.crt", "front.key", "never-there"])
    assert off["changed"] and off["removed"] == [str(folder / "front.crt"), str(folder / "front.key")], off
    assert sorted(os.listdir(str(folder))) == ["front.conf"]


def test_a_file_that_cannot_be_written_is_e_front_naming_it_and_a_bad_mode_is_e_config(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir(mode=0o700)
    (folder / "front.conf").mkdir()  # a folder where the file goes
    text, failed = front_files(tmp_path, folder=str(folder), files=[{"path": "front.conf", "content": "x\n"}])
    assert failed["failed"] and failed["msg"].startswith("E_FRONT: the front's file %s could not be written"
                                                         % (folder / "front.conf")), failed
    text, bad = front_files(tmp_path, folder=str(folder), files=[{"path": "a", "content": "x\n", "mode": "rw"}])
    assert bad["failed"] and bad["msg"] == "E_CONFIG: mode of %s is 'rw'; allowed: an octal mode such as 0644" % (
        folder / "a"), bad


def test_files_written_but_not_served_yet_are_unserved_until_their_digest_is_recorded(tmp_path):
    # A reload nginx refused leaves the files written: the next run must still reload (roles/front records the
    # digest in served.sha256 only once nginx serves them).
    folder = tmp_path / "f"
    files = [{"path": "front.conf", "content": "a\n", "mode": "0600"},
             {"path": "front.key", "secret_content": KEY, "mode": "0600"}]
    text, first = front_files(tmp_path, folder=str(folder), files=files, served_file="served.sha256")
    assert first["changed"] and first["unserved"] and len(first["digest"]) == 64, first
    text, again = front_files(tmp_path, folder=str(folder), files=files, served_file="served.sha256")
    assert not again["changed"] and again["unserved"] and again["digest"] == first["digest"], again
    (folder / "served.sha256").write_text(first["digest"] + "\n")
    text, served = front_files(tmp_path, folder=str(folder), files=files, served_file="served.sha256")
    assert not served["changed"] and not served["unserved"], served
    # Another key, mode or file given or taken away is another digest: unserved again.
    for other in ([dict(files[0]), {"path": "front.key", "secret_content": KEY + "x", "mode": "0600"}],
                  [dict(files[0], mode="0644"), files[1]], files[:1]):
        text, changed = front_files(tmp_path, check=True, folder=str(folder), files=other, served_file="served.sha256")
        assert changed["unserved"] and changed["digest"] != first["digest"], (other, changed)
    text, gone = front_files(tmp_path, check=True, folder=str(folder), files=files, absent=["front.crt"],
                             served_file="served.sha256")
    assert gone["unserved"] and not gone["changed"], gone
    # Without served_file nothing is unserved; the digest shows nothing of the key.
    text, plain = front_files(tmp_path, folder=str(folder), files=files)
    assert not plain["unserved"] and plain["digest"] == first["digest"] and "k3yM4terial" not in text, plain

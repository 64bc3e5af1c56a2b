"""The weights stage's dummy mode for real: the tiny GGUF made on a host by the playbook, then served
by Debian's llama-server in a container (the command rendered from templates/llamacpp.j2), with the
checks a burn-in must pass: plain replies, streaming, json_schema, json_object, forced and automatic
tool calls whose arguments parse, concurrent = sequential under greedy decoding, and a second seed
as a draft model (draft-simple) giving the same replies. Vision is on: the stage writes the burn-in
projector (mmproj.gguf) too, the command loads it (--mmproj), and images by data URL are served:
counted (more pixels, more tokens; two images twice one), a corrupt one refused, through verify's own
image_input check and a request of the test's own."""
import concurrent.futures
import hashlib
import json
import os
import time
import urllib.error
import urllib.request

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.filter.engines import engine_command
from ansible_collections.gpuserve.llm.plugins.module_utils import bad_media, engines, verify
from ansible_collections.gpuserve.llm.plugins.module_utils import prompts as media
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError
from conftest import ROOT, docker
from front_alone import CLIENTS, Front

MODEL = "gpuserve/tiny-llama-dummy"
DRAFT = "gpuserve/tiny-llama-draft"
API_KEY = "sk-burn-in-test"
# Vision on: llama-server 0.7.0 fetches any http(s) image URL, so validation takes llm_media_urls: any only.
CPU = dict(llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=True, llm_media_urls="any", llm_dense="q4",
           llm_model_dense="q4", llm_reserve_gib=0, llm_kv_cap_gib=0, llm_weights="dummy", llm_model=MODEL,
           llm_model_max_context=8192, llm_context=2048, llm_max_tokens=256, llm_parallel=4, llm_host="127.0.0.1",
           llm_served_model_name="tiny")
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"]}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Engine:
    """llama-server in a container on the test bed's daemon, started from the rendered command."""

    def __init__(self, docker_host, image, name, port, model_dir, draft_dir=None):
        with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
            settings = {k: v for k, v in yaml.safe_load(f).items() if "{{" not in str(v)}
        # The engine alone on `port` (no front here): the rendered command binds llm_engine_host:llm_engine_port.
        settings.update(CPU, llm_engine_port=port, llm_api_key=API_KEY, llm_drafter=DRAFT if draft_dir else "off")
        paths = {"model_file": "/models/main/model.gguf", "draft_file": "/models/draft/model.gguf", "threads": 2,
                 "mmproj_file": "/models/main/mmproj.gguf"}  # what roles/weights/tasks/dummy.yml records
        command = engine_command(settings, paths, {})
        assert command["argv"][command["argv"].index("--mmproj") + 1] == paths["mmproj_file"]
        args = ["run", "-d", "--name", name, "--network", "host", "-v", "%s:/models/main:ro" % model_dir]
        if draft_dir:
            args += ["-v", "%s:/models/draft:ro" % draft_dir]
        for key, value in command["env"].items():
            args += ["-e", "%s=%s" % (key, value)]
        self.docker_host, self.name, self.url = docker_host, name, "http://127.0.0.1:%d" % port
        docker(docker_host, "rm", "-f", name, check=False)
        docker(docker_host, *(args + [image] + command["argv"]))
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        raise AssertionError("llama-server not healthy in 60 s:\n" + docker(docker_host, "logs", name, check=False).stdout[-3000:])

    def chat(self, content="Say hello.", **body):
        request = dict(model="tiny", messages=[{"role": "user", "content": content}], temperature=0, max_tokens=120)
        request.update(body)
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=json.dumps(request).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
        if body.get("stream"):
            with urllib.request.urlopen(req, timeout=60) as r:
                lines = [line.decode().strip() for line in r if line.strip()]
            chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
            return chunks, lines
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["choices"][0]

    def stop(self):
        docker(self.docker_host, "rm", "-f", self.name, check=False)


@pytest.fixture
def made(fleet, tmp_path):
    """The image and the dummy weights (main + draft) made by the playbook on one local host."""
    fleet.host("cpu1", None, llm_drafter=DRAFT,
               image_debian_cache=os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images")), **CPU)
    first = fleet.run("site.yml", "--tags", "image,weights")
    assert first.rc == 0, first
    root = tmp_path / "cpu1" / "data" / "models" / "dummy"
    return first, root / MODEL, root / DRAFT


def test_dummy_gguf_is_made_once_and_check_mode_writes_nothing(fleet, made):
    first, main, draft = made
    assert first.says("%s: dummy weights - GGUF, 2 layers" % MODEL), first
    assert first.says("mmproj (mlp, 148 tokens an image at most); draft %s (seed 1)" % DRAFT), first
    assert (main / "model.gguf").is_file() and (draft / "model.gguf").is_file()
    stamp = json.loads((main / "gpuserve-dummy.json").read_text())
    assert stamp["dummy"] is True and stamp["files"]["model.gguf"] == sha256(str(main / "model.gguf"))
    # vision: the projector beside the model, in the stamp; the draft model has none
    assert stamp["files"]["mmproj.gguf"] == sha256(str(main / "mmproj.gguf"))
    assert not (draft / "mmproj.gguf").exists()
    assert sha256(str(main / "model.gguf")) != sha256(str(draft / "model.gguf"))

    again = fleet.run("site.yml", "--tags", "weights")
    assert again.rc == 0 and again.recap["cpu1"]["changed"] == 0, again

    before = sha256(str(main / "model.gguf"))
    preview = fleet.run("site.yml", "--tags", "weights", "--check", "-e", "weights_dummy_seed=7")
    assert preview.rc == 0 and preview.recap["cpu1"]["changed"] >= 1, preview
    assert preview.says("seed 7") and preview.says("(would be made)"), preview
    assert sha256(str(main / "model.gguf")) == before

    # A damaged file is made again: the stamp's digest no longer matches.
    with open(str(main / "model.gguf"), "r+b") as f:
        f.seek(4096)
        f.write(b"\xff" * 64)
    mended = fleet.run("site.yml", "--tags", "weights")
    assert mended.rc == 0 and mended.recap["cpu1"]["changed"] == 1, mended
    assert sha256(str(main / "model.gguf")) == before


def test_the_dummy_gguf_serves_every_burn_in_check_on_llama_server(made, docker_host, tmp_path):
    first, main, draft = made
    image = docker(docker_host, "images", "--format", "{{.Repository}}:{{.Tag}}", "gpuserve/llama.cpp").stdout.split()[0]
    plain = Engine(docker_host, image, "gpuserve-test-burnin", 18110, str(main))
    drafted = front = None
    try:
        # plain reply, and the API key is required
        reply = plain.chat()
        assert reply["finish_reason"] == "stop" and reply["message"]["content"].strip(), reply
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(urllib.request.Request(plain.url + "/v1/models"), timeout=10)
        assert denied.value.code == 401

        # streaming gives the same text in pieces
        chunks, lines = plain.chat(stream=True)
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        assert len(chunks) > 3 and lines[-1] == "data: [DONE]" and streamed == reply["message"]["content"]

        # json_schema: the reply validates (the grammar forces it; the weights make strings close)
        out = plain.chat(response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
        person = json.loads(out["message"]["content"])
        assert isinstance(person["name"], str) and isinstance(person["age"], int) and isinstance(person["tags"], list)
        assert out["finish_reason"] == "stop"

        # json_object: an object that parses, ended by the model, not by max_tokens
        out = plain.chat("Reply in JSON.", response_format={"type": "json_object"})
        assert isinstance(json.loads(out["message"]["content"]), dict) and out["finish_reason"] == "stop"

        # tool calls, forced and automatic: a known name and arguments that parse with the required keys
        for choice in ("required", "auto"):
            out = plain.chat("What is the weather in Paris?", tools=TOOLS, tool_choice=choice)
            assert out["finish_reason"] == "tool_calls", (choice, out)
            calls = out["message"]["tool_calls"]
            assert len(calls) == 1
            function = calls[0]["function"]
            spec = next(t["function"] for t in TOOLS if t["function"]["name"] == function["name"])
            arguments = json.loads(function["arguments"])
            assert set(spec["parameters"]["required"]) <= set(arguments), (choice, function)
        # without tools in the request, no tool call
        assert not plain.chat("What is the weather in Paris?")["message"].get("tool_calls")

        # concurrent = sequential under greedy decoding (distinct prompts, one slot each)
        prompts = ["Prompt number %d: tell me about %s." % (i, w) for i, w in
                   enumerate(["GPUs", "caches", "JSON", "tools", "Debian", "llamas", "drafts", "ports"])]
        alone = [plain.chat(p, max_tokens=40)["message"]["content"] for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda p: plain.chat(p, max_tokens=40)["message"]["content"], prompts))
        assert together == alone

        # images by data URL (the burn-in projector): verify's own check, as the verify role runs it -
        # 64x64 and 448x672 PNGs accepted and counted, the larger more, two images twice one, a corrupt
        # PNG refused with a 4xx and the engine still serving; no URL step (llm_media_urls: any)
        client = Client(plain.url, API_KEY, "tiny", 60)
        checks = verify.Verifier(client, {"vision": True, "dummy": True, "media_urls": "any",
                                          "no_video": engines.PROFILES["llamacpp"]["no_video"]})
        images = checks.image_input()
        assert (images["status"], images["passed"], images["total"]) == ("pass", 4, 4), images
        # 4 tokens a 28 px tile, plus an overview (dummy_mmproj's anyres grid): 3x3+1 tiles, 4x6+1 tiles
        assert images["tokens"] == {"a 64x64 PNG": 40, "a 448x672 PNG": 100}, images
        video = checks.video_input()  # no ffmpeg in the engine image: not run, not failed
        assert video["status"] == "not_run" and "ffmpeg" in video["why"], video
        # the burn-in reply is the same with an image in the message, and the usage counts it
        pictured = client.chat([{"role": "user", "content": [media.image_url_part(media.png((30, 70, 220))),
                                                             {"type": "text", "text": "Say hello."}]}],
                               temperature=0, max_tokens=120)[0]
        assert pictured["choices"][0]["message"]["content"] == reply["message"]["content"], pictured
        assert pictured["usage"]["prompt_tokens"] == client.chat([{"role": "user", "content": "Say hello."}], temperature=0,
                                                                 max_tokens=1)[0]["usage"]["prompt_tokens"] + 40

        # Every class of bad media a client has sent (issue 39 item 2; plugins/module_utils/bad_media.py) is a
        # 4xx, never a 5xx, and the engine answers the next request. llama-server 0.7.0 has no byte limit on a
        # data URL (it decodes a padded PNG up to its IEND) and no per-prompt count of media (vLLM's
        # --limit-mm-per-prompt): those two are served, bounded by the front's body cap and the context.
        answered = {}
        for case in bad_media.cases():
            try:
                client.chat([{"role": "user", "content": case["parts"] + [{"type": "text", "text": "What is it?"}]}],
                            temperature=0, max_tokens=8)
                answered[case["name"]] = (200, "")
            except EndpointError as e:
                answered[case["name"]] = (e.status, str(e)[-200:])
            assert plain.chat(max_tokens=8)["finish_reason"], "the engine did not answer after %s" % case["name"]
        print("bad media, llama-server: %s" % answered)
        served = dict((n, a) for n, a in answered.items() if a[0] is None or a[0] >= 500 or a[0] < 400)
        assert set(served) <= {"oversize-data-url", "too-many-images", "truncated-avi-frames"}, served
        assert "uri must be base64 encoded" in answered["data-url-no-base64"][1], answered
        assert [a[0] for n, a in served.items() if a[0] is None or a[0] >= 500] == [], served

        # The same catalogue through a front (roles/front's configuration and JavaScript, nginx from the Debian
        # root): the front reads each POST body before any of it goes on, so the oversize item, the count
        # llama-server does not keep, and any video (llama-server here decodes none) are a 400 there, saying
        # what was wrong, and never reach the engine; the rest reach the engine and are refused by it as above.
        front = Front(docker_host, "gpuserve-test-burnin-front", 18112, "127.0.0.1:18110", str(tmp_path / "front"),
                      upstream_key=API_KEY, front_routes=engines.PROFILES["llamacpp"]["front_routes"],
                      front_media=engines.PROFILES["llamacpp"]["media_per_request"], front_body_max_kib=140000,
                      front_media_why="llamacpp takes at most 4 images and no video a request")
        fronted = Client(front.url, CLIENTS["alice"], "tiny", 60)
        through = {}
        for case in bad_media.cases():
            try:
                fronted.chat([{"role": "user", "content": case["parts"] + [{"type": "text", "text": "What is it?"}]}],
                             temperature=0, max_tokens=8)
                through[case["name"]] = (200, "")
            except EndpointError as e:
                through[case["name"]] = (e.status, str(e))
        print("bad media through the front: %s" % dict((n, a[0]) for n, a in through.items()))
        assert [(n, a) for n, a in through.items() if not 400 <= (a[0] or 0) < 500] == [], through
        # and every malformed data: URL (the front takes data:<type>/<subtype>;base64,<base64> only: SGLang 0.5.5
        # ignores the header and answers a 500 for what it cannot decode)
        at_front = sorted(set(c["name"] for c in bad_media.cases() if any(p["type"] == "video_url" for p in c["parts"]))
                          | {"too-many-images", "oversize-data-url", "bomb-png"}
                          | set(c["name"] for c in bad_media.cases() if c["name"].startswith("data-url-")) - {
                              "data-url-text-mime"})
        for name, says in (("data-url-no-base64", "is a data: URL that is not base64"),
                           ("data-url-other-encoding", "is a data: URL that is not base64"),
                           ("data-url-no-comma", "is a data: URL with no comma before its data"),
                           ("data-url-empty", "is a data: URL with no data"),
                           ("data-url-invalid-base64", "is a data: URL with data that is not base64"),
                           ("bomb-png", "is a PNG of 20000 x 20000 pixels: over 178956970 pixels")):
            assert "messages[0].content[0].image_url.url " + says in through[name][1], (name, through[name])
        # a media URL that names a file on the engine's host, or one llm_media_urls does not let it fetch: a 400
        # 12 MB of base64 with one character that is not: a 400 (a regular expression over it exceeded PCRE's
        # match limit in njs: a 500)
        long_png = media.image_url_part(media.png((30, 70, 220)) + b"\0" * (9 * 1048576))["image_url"]["url"]
        for url, says in ((long_png[:-8] + "*AAAAAAA", "is a data: URL with data that is not base64"),
                          ("/etc/passwd.png", "neither a data: URL nor an http(s) URL"),
                          ("file:///etc/passwd.png", "neither a data: URL nor an http(s) URL"),
                          ("http://media-check.invalid/x.png", "a URL this endpoint does not fetch (llm_media_urls: "
                                                               "data_only)")):
            with pytest.raises(EndpointError) as refused:
                fronted.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
                             max_tokens=8)
            assert refused.value.status == 400 and says in str(refused.value), (url, str(refused.value))
        assert "5 images in one request: llamacpp takes at most 4 images and no video a request" in \
            through["too-many-images"][1], through
        assert "1 video in one request: llamacpp takes" in through["bottom-up-avi"][1], through
        assert "messages[0].content[0].image_url.url is 20.0 MiB (20971521 bytes): over this endpoint's 20.0 MiB a " \
            "media item" in through["oversize-data-url"][1], through
        # what the front refused never went upstream; the rest did and were refused by the engine
        went = [line for line in front.logs().splitlines() if '"POST /v1/chat/completions" 400 ' in line]
        assert len([line for line in went if line.endswith(" upstream=- path=")]) == len(at_front) + 4, went
        assert len(went) == len(through) + 4, went
        assert through["truncated-png"][0] == answered["truncated-png"][0]
        assert fronted.chat([{"role": "user", "content": [media.image_url_part(media.png((30, 70, 220))),
                                                          {"type": "text", "text": "Say hello."}]}],
                            temperature=0, max_tokens=120)[0]["choices"][0]["message"]["content"] == \
            reply["message"]["content"]
        deep = b"[" * 40 + b"]" * 40  # njs reads 32 levels
        for body, says in ((b"{\"messages\": [", "the request body is not JSON"), (b"", "the request has no body"),
                           (b'{"messages": [{"role": "user", "content": [{"type": "image_url", "x": %s}]}]}' % deep,
                            "nests JSON deeper than this front reads"),
                           (b'{"messages": [{"role": "user", "content": [{"type": "input_audio", "x": %s}]}]}' % deep,
                            "nests JSON deeper than this front reads")):
            request = urllib.request.Request(front.url + "/v1/chat/completions", data=body, method="POST", headers={
                "Authorization": "Bearer " + CLIENTS["alice"], "Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 400 and says in refused.value.read().decode(), says
        # vLLM 0.26.0 reads a part with a uuid by its keys, whatever its type (_parse_chat_message_content_mm_part):
        # the front counts and checks such a part as the image vLLM would read
        uuid_part = {"type": "text", "text": "", "uuid": "u", "image_url": {"url": "file:///etc/passwd.png"}}
        with pytest.raises(EndpointError) as refused:
            fronted.chat([{"role": "user", "content": [uuid_part]}], max_tokens=8)
        assert refused.value.status == 400 and "messages[0].content[0].image_url.url is neither a data: URL nor an " \
            "http(s) URL" in str(refused.value), str(refused.value)
        # deeper than njs reads but no media in it (a deep schema): it goes on unread, and is served
        assert fronted.chat([{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=8,
                            metadata={"deep": json.loads(deep)})[0]["choices"][0]["finish_reason"]
        # a stream through the check is a stream: the engine's chunks, the same text as the engine's own reply
        streamed = fronted.stream([{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=120)
        assert streamed["chunks"] > 1 and streamed["text"] == reply["message"]["content"], streamed

        # a second seed as draft model (draft-simple): the same replies as without drafting
        drafted = Engine(docker_host, image, "gpuserve-test-burnin-draft", 18111, str(main), str(draft))
        assert [drafted.chat(p, max_tokens=40)["message"]["content"] for p in prompts] == alone
        logs = docker(docker_host, "logs", drafted.name, check=False).stdout
        assert "draft acceptance" in logs, logs[-2000:]
    finally:
        plain.stop()
        for other in (drafted, front):
            if other:
                other.stop()


def test_dummy_model_folder_for_vllm_has_the_layers_given_its_vision_shape_and_refuses_mtp_with_it(fleet, tmp_path):
    from tokenizers import Tokenizer

    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_weights="dummy", llm_vision=False, weights_dummy_layers=8)
    fleet.host("gpu2", "rtxpro6000x4-healthy.json", llm_weights="dummy")  # vision on: GLM-4.6V's shape
    fleet.host("gpu3", "rtxpro6000x4-healthy.json", llm_weights="dummy", llm_drafter="mtp")
    result = fleet.run("site.yml", "--tags", "weights")
    assert [result.recap[h]["failed"] for h in ("gpu1", "gpu2", "gpu3")] == [0, 0, 1], result
    assert result.says("zai-org/GLM-4.6V-FP8: dummy weights - Glm4MoeForCausalLM, 8 layers, config and tokenizer only"), result
    # vLLM 0.26.0 has no MTP drafting for GLM's vision model: refused before anything is made
    assert result.says("E_UNSUPPORTED [error] gpu3 llm_drafter: llm_drafter is 'mtp' on vllm: vLLM 0.26.0 has no MTP "
                       "drafting for GLM's vision models"), result
    assert not (tmp_path / "gpu3" / "data" / "models").exists()
    vision = tmp_path / "gpu2" / "data" / "models" / "dummy" / "zai-org" / "GLM-4.6V-FP8"
    assert "vision_config" in json.loads((vision / "config.json").read_text())
    assert (vision / "preprocessor_config.json").exists() and (vision / "chat_template.jinja").exists()

    folder = tmp_path / "gpu1" / "data" / "models" / "dummy" / "zai-org" / "GLM-4.6V-FP8"
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 8 and config["hidden_size"] == 4096
    # an FP8 checkpoint's dummy declares FP8 weights, so the engine allocates what the real one needs
    assert config["quantization_config"]["quant_method"] == "fp8"
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tokenizer.token_to_id("<tool_call>") is not None and tokenizer.token_to_id("</think>") is not None
    assert not list(folder.glob("*.safetensors"))
    again = fleet.run("site.yml", "--tags", "weights", "--limit", "gpu1")
    assert again.rc == 0 and again.recap["gpu1"]["changed"] == 0, again

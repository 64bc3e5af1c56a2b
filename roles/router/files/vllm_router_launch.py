# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""vllm-router 0.1.17 without its Python dependencies: the Rust router (vllm_router_rs) started from the
wheel unzipped into /opt/vllm-router. vllm_router.launch_router (the console script) imports mini_lb, which
imports aiohttp, fastapi, uvicorn and orjson, and setproctitle; this needs only the standard library.
The router's own key for the workers (its --api-key) comes from the environment, GPUSERVE_ROUTER_API_KEY, so that
it is in no process's argv: vllm-router 0.1.17 sends the client's headers on the routes it knows
(/v1/chat/completions, /v1/completions) but on /v1/responses (its transparent proxy) only its own key."""
import argparse
import os
import sys

sys.path.insert(0, "/opt/vllm-router")
from vllm_router.router_args import RouterArgs  # noqa: E402
from vllm_router.router import Router  # noqa: E402

p = argparse.ArgumentParser(prog="vllm-router")
RouterArgs.add_cli_args(p, use_router_prefix=False)
a = RouterArgs.from_cli_args(p.parse_args(), use_router_prefix=False)
a.api_key = os.environ.get("GPUSERVE_ROUTER_API_KEY") or a.api_key
a._validate_router_args()
Router.from_args(a).start()

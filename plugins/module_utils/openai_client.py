# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A small client of the OpenAI-compatible API the engines serve, for verify and bench.

Standard library HTTP (http.client) so that it runs in the host's virtualenv with nothing added;
one request per thread, so concurrent requests are concurrent on the wire.
Streaming replies are read as server-sent events: the time of each content chunk is taken when
its line arrives, which is what a user of the stream sees.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import ssl
import time

import http.client as http_client

from urllib.parse import urlsplit


class EndpointError(Exception):
    """A request the engine refused or did not answer (status None when nothing answered)."""

    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status


class Client(object):
    def __init__(self, url, api_key="", model="", timeout=600, tls=None):
        """`tls`: {"ca_file": a CA to verify HTTPS with (else the system's), "verify": False to not verify}."""
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        parts = urlsplit(self.url)
        self._netloc, self._base = parts.netloc, parts.path.rstrip("/")
        # A plain HTTP connection costs nothing to make; for HTTPS one TLS context serves every request
        # (making one per request costs tens of milliseconds of the client's CPU).
        if parts.scheme == "https":
            tls = tls or {}
            context = ssl.create_default_context(cafile=tls.get("ca_file") or None)
            if tls.get("verify") is False:
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            self._conn_class, self._conn_args = http_client.HTTPSConnection, {"context": context}
        else:
            self._conn_class, self._conn_args = http_client.HTTPConnection, {}

    def _headers(self):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        return headers

    def _scrub(self, text):
        return text.replace(self.api_key, "<api key>") if self.api_key else text

    def _send(self, path, body, timeout, method=None):
        """(the connection, its response) of a GET (or a POST of JSON `body`; `method` another). One
        connection per request: concurrent requests are concurrent connections, as separate users' would be."""
        conn = self._conn_class(self._netloc, timeout=timeout or self.timeout, **self._conn_args)
        try:
            conn.request(method or ("POST" if body is not None else "GET"), self._base + path,
                         body=json.dumps(body).encode("utf-8") if body is not None else None, headers=self._headers())
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def call(self, path, body=None, timeout=None, method=None):
        """(status, text) of a GET (or a POST of JSON `body`; `method` another, such as a POST without a
        body) whatever the status; (None, the error) when nothing answered. The text is the engine's own
        (a health poll or smoke request shows it)."""
        conn = None
        try:
            conn, response = self._send(path, body, timeout, method)
            return response.status, response.read().decode("utf-8", "replace")
        except (socket.error, OSError, http_client.HTTPException) as e:
            return None, str(e)
        finally:
            if conn is not None:
                conn.close()

    def _open(self, path, body=None, timeout=None):
        """The response of a GET (or a POST of JSON `body`), status 200 only."""
        try:
            conn, response = self._send(path, body, timeout)
        except (socket.error, OSError, http_client.HTTPException) as e:
            raise EndpointError(None, "%s%s did not answer: %s" % (self.url, path, e))
        if response.status != 200:
            text = response.read().decode("utf-8", "replace")
            conn.close()
            raise EndpointError(response.status, "%s%s answered HTTP %s: %s" % (
                self.url, path, response.status, self._scrub(text)[:400]))
        return response

    def get_text(self, path, timeout=30):
        response = self._open(path, timeout=timeout)
        return response.read().decode("utf-8", "replace")

    def body(self, messages, **params):
        body = {"model": self.model, "messages": messages}
        body.update(params)
        return body

    def chat(self, messages, **params):
        """A whole (non-streamed) chat completion: (the response's JSON, seconds it took)."""
        start = time.time()
        response = self._open("/v1/chat/completions", self.body(messages, **params))
        try:
            data = json.loads(response.read().decode("utf-8", "replace"))
        except ValueError as e:
            raise EndpointError(200, "%s/v1/chat/completions answered something that is not JSON: %s" % (self.url, e))
        return data, time.time() - start

    def stream(self, messages, **params):
        """A streamed chat completion, timed from the client: the text, when the request went out, the times
        of the first and last content chunks, the chunk count, and the usage and engine timings the final
        chunk carries when the engine sends them."""
        params = dict(params, stream=True, stream_options={"include_usage": True})
        out = {"text": "", "reasoning": "", "chunks": 0, "first": None, "last": None, "usage": None,
               "timings": None, "finish_reason": None, "tool_calls": 0}
        out["start"] = time.time()
        response = self._open("/v1/chat/completions", self.body(messages, **params))
        for raw in lines(response):
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            now = time.time()
            try:
                chunk = json.loads(payload.decode("utf-8", "replace"))
            except ValueError:
                continue
            if chunk.get("usage"):
                out["usage"] = chunk["usage"]
            if chunk.get("timings"):
                out["timings"] = chunk["timings"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                said = (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")
                if said or delta.get("tool_calls"):
                    if out["first"] is None:
                        out["first"] = now
                    out["last"] = now
                    out["chunks"] += 1
                    out["text"] += delta.get("content") or ""
                    out["reasoning"] += delta.get("reasoning_content") or delta.get("reasoning") or ""
                    out["tool_calls"] += len(delta.get("tool_calls") or [])
                if choice.get("finish_reason"):
                    out["finish_reason"] = choice["finish_reason"]
        out["end"] = time.time()
        return out

    def metrics(self):
        """The engine's Prometheus text, or '' when it has none."""
        try:
            return self.get_text("/metrics")
        except EndpointError:
            return ""


def lines(response):
    """The lines of a streamed body as they arrive (read1 takes what has come in one call, where a
    line-by-line read of a chunked body costs a call per chunk header)."""
    pending = b""
    while True:
        data = response.read1(65536)
        if not data:
            break
        pending += data
        parts = pending.split(b"\n")
        pending = parts.pop()
        yield from parts
    if pending:
        yield pending
    response.close()

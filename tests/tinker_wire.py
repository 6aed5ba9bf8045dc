"""A wire adapter between the Tinker SDK tunedsl installs and SkyRL tx's Tinker server.

SkyRL tx (``skyrl-tx`` on the package index) is a real Tinker-compatible trainer and
sampler on JAX that runs on a CPU; Trinity-RFT's Tinker mode (its ``TinkerModel`` engine
and Tinker trainer) is real Trinity code that needs no GPU. Between them sits the wire:
the SDK (``tinker`` 0.38, the version Trinity's ``tinker`` extra resolves) speaks a newer
protocol than tx 0.3.0 serves. This adapter is a reverse proxy on loopback that speaks
the SDK's protocol to the SDK and tx's to tx, and translates only where the two differ
(each difference is a function below, named for what it translates). Everything else
passes through unchanged.

    python -m tests.tinker_wire --upstream http://127.0.0.1:PORT [--port N]

prints ``listening on PORT`` once it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from typing import Any

import numpy as np
from aiohttp import ClientSession, ClientTimeout, web

SDK_VERSION = "0.38.0"  # the tinker SDK this adapter translates for
TX_VERSION = "0.3.0"  # the skyrl-tx server it translates to

_NUMPY = {"float32": np.float32, "int64": np.int64}  # the dtypes of the public wire


def client_config() -> dict[str, Any]:
    """``POST /api/v1/client/config`` (SDK feature flags) is newer than tx: the flags tx's
    wire format needs (plain JSON and the httpx transport)."""
    return {"use_pyqwest_transport": False, "proto_compress_fwdbwd": False}


def _tensor(message: Any) -> dict[str, Any]:
    """A proto ``Tensor`` (dense bytes) as tx's JSON ``TensorData``."""
    if message.HasField("sparse_csr"):
        raise ValueError("the adapter translates dense tensors only")
    from tinker.proto import tinker_public_pb2 as public_pb

    name = public_pb.DType.Name(message.dtype).removeprefix("DTYPE_").lower()
    values = np.frombuffer(message.dense, dtype=_NUMPY[name])
    return {"data": values.tolist(), "dtype": name,
            "shape": list(message.shape) or [len(values)]}


def forward_backward_request(body: bytes) -> tuple[str, dict[str, Any]]:
    """The SDK sends ``forward_backward`` as a protobuf ``ForwardBackwardRequest``
    (``forward_only`` for a forward pass); tx takes JSON, at ``/forward`` for a forward
    pass. Returns tx's path and body."""
    from tinker.proto import tinker_public_pb2 as public_pb

    message = public_pb.ForwardBackwardRequest()
    message.ParseFromString(body)
    data = []
    for datum in message.data:
        chunks = [{"tokens": np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()}
                  for chunk in datum.model_input]
        data.append({"model_input": {"chunks": chunks},
                     "loss_fn_inputs": {name: _tensor(tensor)
                                        for name, tensor in datum.loss_fn_inputs.items()}})
    fb_input = {"data": data, "loss_fn": message.loss_fn,
                "loss_fn_config": dict(message.loss_fn_config) or None}
    if message.forward_only:
        return "/api/v1/forward", {"model_id": message.model_id, "forward_input": fb_input}
    return "/api/v1/forward_backward", {"model_id": message.model_id,
                                        "forward_backward_input": fb_input}


def asample_future(request: dict[str, Any], future: dict[str, Any]) -> dict[str, Any]:
    """The SDK stamps each sampled sequence with an id the server fixed when the sample was
    submitted (``sample_sequence_ids`` on the future); tx gives none: one per sample."""
    count = int(request.get("num_samples", 1))
    return {**future, "sample_sequence_ids": [f"{future['request_id']}:{i}"
                                              for i in range(count)]}




def _float32(values: list[float | None]) -> bytes:
    """Floats as float32 bytes, a missing one (JSON null) as NaN, as the proto has it."""
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float32).tobytes()


def sample_response(result: dict[str, Any], prompt_length: int | None = None) -> bytes:
    """tx answers a finished sample as JSON; the SDK reads a ``SampleResponse`` only as
    protobuf (tokens int32, log-probs float32). The SDK's prompt log-probs have one entry
    per prompt token, the first (nothing to condition on) missing (NaN on the wire); tx
    0.3.0 leaves that entry out, so every later one would be read one token early."""
    from tinker.proto import tinker_public_pb2 as public_pb

    message = public_pb.SampleResponse()
    for sequence in result["sequences"]:
        out = message.sequences.add()
        out.stop_reason = public_pb.StopReason.Value(f"STOP_REASON_{sequence['stop_reason'].upper()}")
        out.tokens = np.asarray(sequence["tokens"], dtype=np.int32).tobytes()
        if sequence.get("logprobs") is not None:
            out.logprobs = _float32(sequence["logprobs"])
    prompt_logprobs = result.get("prompt_logprobs")
    if prompt_logprobs is not None:
        if prompt_length is not None and len(prompt_logprobs) == prompt_length - 1:
            prompt_logprobs = [None, *prompt_logprobs]
        message.prompt_logprobs = _float32(prompt_logprobs)
    return message.SerializeToString()


def forward_backward_output(result: dict[str, Any]) -> bytes:
    """tx answers a finished forward(-backward) as JSON; the SDK reads a
    ``ForwardBackwardOutput`` only as protobuf: one ``ArrayRecord`` whose fields are
    batched tensors (every datum's values end to end, with byte offsets)."""
    from tinker.proto import tinker_public_pb2 as public_pb

    message = public_pb.ForwardBackwardOutput()
    message.loss_fn_output_type = result.get("loss_fn_output_type") or "ArrayRecord"
    outputs = result.get("loss_fn_outputs") or []
    metrics = dict(result.get("metrics") or {})
    if "loss:sum" not in metrics and all("elementwise_loss" in o for o in outputs):
        # The SDK's forward_backward_custom reads the pass's summed loss from this metric;
        # tx reports the per-token losses it sums.
        metrics["loss:sum"] = float(sum(sum(o["elementwise_loss"]["data"]) for o in outputs))
    for name, value in metrics.items():
        message.metrics[name] = float(value)
    if outputs:
        record = message.loss_fn_outputs.add()
        record.num_datums = len(outputs)
        for name in outputs[0]:
            tensors = [output[name] for output in outputs]
            dtype = tensors[0].get("dtype") or "float32"
            arrays = [np.asarray(t["data"], dtype=_NUMPY[dtype]).ravel() for t in tensors]
            batched = record.fields[name]
            batched.dtype = public_pb.DType.Value(f"DTYPE_{dtype.upper()}")
            batched.data = b"".join(a.tobytes() for a in arrays)
            ends = np.cumsum([0] + [a.nbytes for a in arrays])
            batched.offsets = ends.astype(np.int64).tobytes()
            batched.trailing_shape.extend(list(tensors[0].get("shape") or [])[1:])
    return message.SerializeToString()


def _proto_result(result: Any, prompt_length: int | None) -> bytes | None:
    """The protobuf the SDK expects for a finished future's JSON result, or None for a
    result it reads as JSON."""
    if isinstance(result, dict) and "sequences" in result:
        return sample_response(result, prompt_length)
    if isinstance(result, dict) and "loss_fn_outputs" in result:
        return forward_backward_output(result)
    return None


class TinkerWire:
    """The adapter as a server on 127.0.0.1 in a background thread of its own
    (``with TinkerWire(upstream) as wire: wire.url``), or run as a process (``main``)."""

    def __init__(self, upstream: str, *, port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = port
        self.translated: list[str] = []  # the paths translated, in order (for tests)
        self.requests: list[tuple[str, bytes]] = []  # every path asked and its body, in order
        self.failures: dict[str, list[tuple[int, str, bytes]]] = {}  # path -> answers to give
        self.samplers: dict[str, dict[str, Any]] = {}  # sampling session -> what made it
        self.models: dict[str, str] = {}  # the SDK's name of a model -> tx's
        self.prompt_lengths: dict[str, int] = {}  # a sample's request id -> its prompt's tokens
        self._session: ClientSession | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _forward(self, method: str, path: str, body: bytes,
                       headers: dict[str, str]) -> tuple[int, str, bytes]:
        assert self._session is not None
        async with self._session.request(method, self.upstream + path, data=body,
                                         headers=headers) as reply:
            return reply.status, reply.content_type, await reply.read()

    def fail(self, path: str, status: int, detail: str, times: int = 1,
             holding: bytes = b"") -> None:
        """Answer the next ``times`` requests to ``path`` whose body holds ``holding`` with
        ``status`` and ``detail``, as a Tinker server refusing them does (a test's
        scripted failure)."""
        self.failures.setdefault(path, []).extend([(status, detail, holding)] * times)

    def paths(self) -> list[str]:
        """The paths asked so far, in order."""
        return [path for path, _ in self.requests]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((request.path, body))
        scripted = self.failures.get(request.path)
        if scripted and scripted[0][2] in body:
            status, detail, _ = scripted.pop(0)
            return web.json_response({"detail": detail}, status=status)
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length", "content-encoding")}
        path = request.path
        if path == "/api/v1/client/config":
            self.translated.append(path)
            return web.json_response(client_config())
        if path == "/api/v1/client/dynamic_config":
            self.translated.append(path)
            return web.json_response({})  # every flag at the SDK's default
        if path.startswith("/api/v1/samplers/"):
            self.translated.append("/api/v1/samplers/{id}")
            return await self._sampler(path.rsplit("/", 1)[1], headers)
        if path == "/api/v1/forward_backward" and "protobuf" in request.content_type:
            self.translated.append(path)
            path, translated = forward_backward_request(body)
            translated["model_id"] = self.models.get(translated["model_id"],
                                                     translated["model_id"])
            body = json.dumps(translated).encode()
            headers["Content-Type"] = "application/json"
        elif "json" in request.content_type and body:
            asked = json.loads(body)
            if path == "/api/v1/load_weights" and asked.get("model_id") is None:
                self.translated.append("/api/v1/load_weights (create)")
                asked = await self._create_for_load(asked, headers)
            if isinstance(asked, dict) and asked.get("model_id") in self.models:
                asked["model_id"] = self.models[asked["model_id"]]
            body = json.dumps(asked).encode()
        for alias, model_id in self.models.items():  # ids in paths (get_info's, runs')
            path = path.replace(alias, model_id)
        status, content_type, payload = await self._forward(request.method, path + (
            f"?{request.query_string}" if request.query_string else ""), body, headers)
        if status == 200 and path == "/api/v1/create_sampling_session":
            made = json.loads(payload)["sampling_session_id"]
            self.samplers[made] = json.loads(body)
        if status == 200 and path == "/api/v1/asample":
            self.translated.append(path)
            asked, future = json.loads(body), json.loads(payload)
            self.prompt_lengths[future["request_id"]] = sum(
                len(chunk.get("tokens", [])) for chunk in asked["prompt"]["chunks"])
            payload = json.dumps(asample_future(asked, future)).encode()
        if (status == 200 and path == "/api/v1/retrieve_future"
                and "protobuf" in request.headers.get("Accept", "")):
            request_id = json.loads(body).get("request_id")
            proto = _proto_result(json.loads(payload), self.prompt_lengths.get(request_id))
            if proto is not None:
                self.translated.append(path)
                return web.Response(body=proto, content_type="application/x-protobuf")
        return web.Response(body=payload, status=status, content_type=content_type)

    async def _create_for_load(self, asked: dict[str, Any],
                               headers: dict[str, str]) -> dict[str, Any]:
        """Create-via-load: the SDK creates a training client from a checkpoint with one
        ``load_weights`` of ``session_id`` and ``model_seq_id`` and then calls the model
        ``{session_id}:train:{model_seq_id}``; tx 0.3.0 loads into a model it made, named by
        it. Make that model (the checkpoint's base model and LoRA rank, from tx's record of
        its training run), wait for it, and call it by the SDK's name from then on."""
        run_id = asked["path"].removeprefix("tinker://").split("/")[0]
        _, _, found = await self._forward("GET", f"/api/v1/training_runs/{run_id}", b"",
                                          headers)
        run = json.loads(found)
        create = {"session_id": asked["session_id"], "model_seq_id": asked["model_seq_id"],
                  "base_model": asked.get("base_model") or run["base_model"],
                  "lora_config": {"rank": run["lora_rank"]}}
        _, _, made = await self._forward("POST", "/api/v1/create_model",
                                         json.dumps(create).encode(), headers)
        made = json.loads(made)
        await self._finished(made["request_id"], headers)
        self.models[f"{asked['session_id']}:train:{asked['model_seq_id']}"] = made["model_id"]
        return {"model_id": made["model_id"], "path": asked["path"],
                "type": "load_weights"}

    async def _finished(self, request_id: str, headers: dict[str, str]) -> None:
        """Wait until tx has carried out (or refused) the request ``request_id``."""
        while True:
            status, _, _ = await self._forward(
                "POST", "/api/v1/retrieve_future",
                json.dumps({"request_id": request_id}).encode(), headers)
            if status != 408:  # tx's long poll ran out: ask again
                return
            await asyncio.sleep(0.2)

    async def _sampler(self, session_id: str, headers: dict[str, str]) -> web.Response:
        """``GET /api/v1/samplers/{id}`` (a sampler's base model, newer than tx) from the
        ``create_sampling_session`` request that made it; a sampler of saved weights has
        the one base model tx serves."""
        made = self.samplers.get(session_id)
        if made is None:
            return web.json_response({"detail": f"no sampler {session_id}"}, status=404)
        base_model = made.get("base_model")
        if base_model is None:
            _, _, served = await self._forward("GET", "/api/v1/get_server_capabilities", b"",
                                               headers)
            [base_model] = [m["model_name"] for m in json.loads(served)["supported_models"]]
        return web.json_response({"sampler_id": session_id, "base_model": base_model,
                                  "model_path": made.get("model_path")})

    async def start(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=None))
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> TinkerWire:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    async def serve() -> None:
        wire = TinkerWire(args.upstream, port=args.port)
        await wire.start()
        print(f"listening on {wire.port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

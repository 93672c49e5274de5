"""Generate a large SGLang-style cold-start log for the classifier benchmark.

8 tensor-parallel ranks, about 30% tqdm lines made of carriage-return updates, a sprinkling of
benign warnings (the CUTE_DSL package-walk line among them) and ordinary request logs. Deterministic.
"""

from __future__ import annotations

import argparse
import random

RANKS = 8
BENIGN = (
    "2026-05-30 19:15:26,720 - CUTE_DSL - WARNING - [handle_import_error] - Unexpected error during package walk: cutlass.cute.experimental",
    "[2025-03-08 12:29:12 TP{r}] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly.",
    "[2025-03-08 12:29:13 TP{r}] The following error message 'operation scheduled before its operands' can be ignored.",
    "[2025-02-25 22:39:15 TP{r}] Using default MoE config. Performance might be sub-optimal! Config file not found at "
    "/root/sglang/python/sglang/srt/layers/moe/fused_moe_triton/configs/E=256,N=64,device_name=NVIDIA_H20.json",
)
ORDINARY = (
    "[2025-03-11 16:16:58 TP{r}] Prefill batch. #new-seq: 9, #new-token: 8192, #cached-token: 1055, cache hit rate: 23.35%, "
    "token usage: 0.00, #running-req: 1, #queue-req: 6",
    "[2025-03-11 16:17:03 TP{r}] Decode batch. #running-req: 16, #token: 17992, token usage: 0.04, gen throughput (token/s): 91.81, #queue-req: 0",
    '[2025-03-08 12:29:32] INFO:     10.0.2.141:37662 - "GET /health HTTP/1.1" 200 OK',
    '[2025-03-08 12:29:33] INFO:     127.0.0.1:49540 - "POST /generate HTTP/1.1" 200 OK',
    "[2025-03-08 12:29:21 TP{r}] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, mem usage=15.54 GB.",
    "[2025-03-08 12:29:21 TP{r}] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB",
)


def tqdm_line(rng: random.Random, total: int) -> str:
    done = rng.randint(0, total - 5)
    updates = []
    for step in range(rng.randint(3, 8)):
        n = min(total, done + step)
        updates.append(f"Loading safetensors checkpoint shards: {100 * n // total:3d}% Completed | {n}/{total} [00:{n % 60:02d}<00:17,  5.67it/s]")
    return "\r" + "\r".join(updates)


def generate(path: str, lines: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write("[2025-03-08 12:29:04] server_args=ServerArgs(model_path='/models/demo', tp_size=8)\n")
        for index in range(lines - 2):
            roll = rng.random()
            rank = index % RANKS
            if roll < 0.30:
                text = tqdm_line(rng, 163)
            elif roll < 0.32:
                text = rng.choice(BENIGN).format(r=rank)
            else:
                text = rng.choice(ORDINARY).format(r=rank)
            out.write(text + "\n")
        out.write("[2025-03-08 12:29:33] The server is fired up and ready to roll!\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    generate(args.path, args.lines)


if __name__ == "__main__":
    main()

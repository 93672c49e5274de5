"""Tiny random-weight Llama models for the real vLLM server of the test fleet (no model hub).

Run with the vLLM venv's Python (it needs ``transformers``, ``tokenizers`` and ``torch``, which the
development venv does not have)::

    <vllm venv>/bin/python tests/harness/tiny_models.py OUT_DIR

makes ``OUT_DIR/tiny`` (head_dim 32: vLLM's CPU attention serves it) and ``OUT_DIR/tiny-hd16``
(head_dim 16: vLLM starts, ``/health`` answers 200, and the first generation kills the engine with
``RuntimeError: Unsupported CPU attention configuration: head_dim=16``). Each is about 0.5 MB: a
byte-level BPE tokenizer trained on a few sentences, saved with ``PreTrainedTokenizerFast``, and a
2-layer ``LlamaForCausalLM`` with random weights (seeded: the same files every time).
"""

from __future__ import annotations

import sys
from pathlib import Path

# name: (hidden_size, attention heads); head_dim = hidden_size / heads
MODELS = {"tiny": (128, 4), "tiny-hd16": (64, 4)}
MAX_POSITIONS = 4096
SENTENCES = [
    "The capital of France is Paris.",
    "The quick brown fox jumps over the lazy dog.",
    "A restart of a large model takes ten to sixty minutes.",
    "Weights load, kernels compile, and the journal fills with lines.",
    "systemd restarts the unit and the server answers on port 8000.",
    "One token is generated to prove that the engine can serve.",
]


def make_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>", "<unk>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(SENTENCES * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(out)


def make_model(out: Path, hidden: int, heads: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    vocab = len(PreTrainedTokenizerFast.from_pretrained(out))
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    for name, (hidden, heads) in MODELS.items():
        out = root / name
        out.mkdir(parents=True, exist_ok=True)
        make_tokenizer(out)
        make_model(out, hidden, heads)
        print(f"{out}: hidden_size={hidden}, heads={heads}, head_dim={hidden // heads}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

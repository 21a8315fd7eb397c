"""Write a tiny random-weight Llama and a word-level tokenizer to a folder,
for vLLM tests that cannot download a model.

    python make_model.py DIR [--layers N] [--hidden H] [--heads Q] [--kv-heads K]
                             [--head-dim D] [--vocab V] [--seed S]

The CPU attention backend takes head_dim in {32, 64, 80, ...}. Weights are
random (seeded), so the text is nonsense, but greedy decoding is
deterministic and depends on every layer's KV: what the tests need.
"""

from __future__ import annotations

import argparse
import json
import os


def parse_args(**shape: int) -> argparse.Namespace:
    """The command line of every make_*_model.py: DIR, then an int option
    for each of @shape (its default; --kv-heads for kv_heads), --vocab
    (512) and --seed (1234)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    for name, default in {**shape, "vocab": 512, "seed": 1234}.items():
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    return ap.parse_args()


def save(model, a) -> None:
    """Save @model with weights scaled up (logits differ clearly between
    tokens, so a wrong KV changes the greedy output), a word-level tokenizer
    of a.vocab words and the arguments it was made with, into a.dir."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    model.save_pretrained(a.dir, safe_serialization=True)

    # Words w0..wN: token id i is the word "w<i>" (ids 0-3 are special).
    special = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(special)}
    for i in range(len(special), a.vocab):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
        unk_token="<unk>", pad_token="<pad>",
    )
    fast.save_pretrained(a.dir)
    with open(os.path.join(a.dir, "kvshare_test_model.json"), "w") as f:
        json.dump(vars(a), f)


def main() -> None:
    a = parse_args(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=0,
                   max_pos=8192)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(a.seed)
    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate or 2 * a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        max_position_embeddings=a.max_pos,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    save(LlamaForCausalLM(cfg), a)


if __name__ == "__main__":
    main()

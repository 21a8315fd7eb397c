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
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--max-pos", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

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

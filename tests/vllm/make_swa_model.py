"""Write a tiny random-weight Gemma 3 (text only: sliding-window attention on
every other layer, full attention on the rest) and a word-level tokenizer to
a folder, for vLLM tests that cannot download a model.

    python make_swa_model.py DIR [--layers N] [--window W] [--hidden H]
                                 [--heads Q] [--kv-heads K] [--head-dim D]

With vLLM's hybrid memory allocator the sliding-window layers and the full
layers are two KV-cache groups. Untied embeddings (tied, each token's logits
favour the token itself and greedy decoding repeats one token; vLLM's Gemma 2
always ties them, its Gemma 3 does not have to), no logit soft-capping.
Weights are random (seeded): greedy decoding is deterministic and depends on
every layer's KV.
"""

from __future__ import annotations

import argparse
import os

from make_model import save  # the weights' scale, the tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--window", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(a.seed)
    cfg = Gemma3TextConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=2 * a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        sliding_window=a.window,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention"
                     for i in range(a.layers)],
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        query_pre_attn_scalar=a.head_dim,
        tie_word_embeddings=False,
        max_position_embeddings=a.max_pos,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    save(Gemma3ForCausalLM(cfg), a)


if __name__ == "__main__":
    main()

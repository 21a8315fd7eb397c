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

import os

from make_model import parse_args, save  # the options, the weights' scale, the tokenizer


def main() -> None:
    a = parse_args(layers=2, window=48, hidden=128, heads=2, kv_heads=1, head_dim=64,
                   max_pos=4096)

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

"""Write a tiny random-weight Qwen3-Next (a hybrid: gated delta-net linear
attention, a state-space layer, beside full attention) and a word-level
tokenizer to a folder, for vLLM tests that cannot download a model.

    python make_ssm_model.py DIR [--layers N] [--hidden H] [--heads Q]
                                 [--kv-heads K] [--head-dim D]

Layers alternate linear attention (even) and full attention (odd): with
vLLM's hybrid memory allocator and prefix caching, a state-space KV-cache
group (vLLM's MambaSpec, "align" mode: the state at block boundaries) beside
a full-attention group. Small mixture-of-experts blocks (4 experts, 2 a
token) as the architecture has. Weights are random (seeded): greedy decoding
is deterministic and depends on every layer's state and KV.
"""

from __future__ import annotations

import os

from make_model import parse_args, save  # the options, the weights' scale, the tokenizer


def main() -> None:
    a = parse_args(layers=2, hidden=128, heads=4, kv_heads=2, head_dim=128, max_pos=4096)

    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(a.seed)
    cfg = Qwen3NextConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=2 * a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        layer_types=["linear_attention" if i % 2 == 0 else "full_attention"
                     for i in range(a.layers)],
        linear_conv_kernel_dim=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=a.hidden,
        shared_expert_intermediate_size=a.hidden,
        decoder_sparse_step=1,
        partial_rotary_factor=0.5,
        tie_word_embeddings=False,
        max_position_embeddings=a.max_pos,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    save(Qwen3NextForCausalLM(cfg), a)


if __name__ == "__main__":
    main()

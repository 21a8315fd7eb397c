"""Write a tiny random-weight DeepSeek-V2 (MLA attention, dense MLPs) and a
word-level tokenizer to a folder, for vLLM tests that cannot download a model.

    python make_mla_model.py DIR [--layers N] [--hidden H] [--heads Q] [--vocab V]

vLLM's CPU MLA backend takes only the latent width of DeepSeek's models,
kv_lora_rank 512 + qk_rope_head_dim 64 = 576, and block_size 16; the rest is
small (hidden size, heads, the no-rope and V head dims, no q LoRA, every MLP
dense). Weights are random (seeded): greedy decoding is deterministic and
depends on every layer's latent KV.
"""

from __future__ import annotations

import os

from make_model import parse_args, save  # the options, the weights' scale, the tokenizer


def main() -> None:
    a = parse_args(layers=2, hidden=128, heads=2, max_pos=4096)

    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(a.seed)
    cfg = DeepseekV2Config(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=2 * a.hidden,
        moe_intermediate_size=a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.heads,
        kv_lora_rank=512,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=32,
        v_head_dim=32,
        head_dim=64,
        first_k_dense_replace=a.layers,  # every layer's MLP dense: no MoE
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        max_position_embeddings=a.max_pos,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    save(DeepseekV2ForCausalLM(cfg), a)


if __name__ == "__main__":
    main()

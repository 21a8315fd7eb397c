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

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, PreTrainedTokenizerFast

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
    model = DeepseekV2ForCausalLM(cfg)
    # Larger than the default init, so that logits differ clearly between
    # tokens and a wrong KV changes the greedy output.
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


if __name__ == "__main__":
    main()

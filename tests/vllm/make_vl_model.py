"""Write a tiny random-weight LLaVA (a CLIP vision tower, a projector, a
Llama) with its processor (a CLIP image processor and a word-level
tokenizer with an "<image>" token) to a folder, for vLLM tests of
multimodal prompts that cannot download a model.

    python make_vl_model.py DIR [--image-size N] [--seed S]

An image is (image_size / 14)^2 placeholder tokens (64 at 112 pixels).
Weights are random and scaled up as make_model.py's (make_model.save
writes them, the tokenizer and the arguments).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model  # noqa: E402

IMAGE_TOKEN = "<image>"


def main() -> None:
    a = make_model.parse_args(image_size=112, layers=2, hidden=128, heads=2, kv_heads=1,
                              head_dim=64)

    import torch
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor,
                              PreTrainedTokenizerFast)

    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(a.seed)
    image_id = a.vocab  # "<image>": one id past the words of make_model.save
    text = LlamaConfig(vocab_size=a.vocab + 1, hidden_size=a.hidden,
                       intermediate_size=2 * a.hidden, num_hidden_layers=a.layers,
                       num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                       head_dim=a.head_dim, max_position_embeddings=4096,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0,
                       torch_dtype="float32")
    vision = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=2, image_size=a.image_size, patch_size=14,
                              projection_dim=64)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_id,
                      vision_feature_select_strategy="default",
                      vision_feature_layer=-1, torch_dtype="float32")
    make_model.save(LlavaForConditionalGeneration(cfg), a)
    # transformers saves the tower's weights as "vision_tower.embeddings...",
    # vLLM's LLaVA loads them as the CLIPVisionModel's, "vision_tower.vision_model...".
    from safetensors.torch import load_file, save_file

    path = os.path.join(a.dir, "model.safetensors")
    w = load_file(path)
    save_file({("vision_tower.vision_model." + k[len("vision_tower."):]
                if k.startswith("vision_tower.") and ".vision_model." not in k else k): v
               for k, v in w.items()}, path, metadata={"format": "pt"})
    # make_model.save's tokenizer, and "<image>" after its words.
    tok = PreTrainedTokenizerFast.from_pretrained(a.dir)
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    assert tok.convert_tokens_to_ids(IMAGE_TOKEN) == image_id
    image = CLIPImageProcessor(size={"shortest_edge": a.image_size},
                               crop_size={"height": a.image_size, "width": a.image_size})
    proc = LlavaProcessor(image_processor=image, tokenizer=tok, patch_size=14,
                          vision_feature_select_strategy="default",
                          num_additional_image_tokens=1, image_token=IMAGE_TOKEN)
    proc.save_pretrained(a.dir)


if __name__ == "__main__":
    main()

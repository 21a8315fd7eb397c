"""How KvshareConnector keys prompts whose token ids do not name their KV:
multimodal inputs (placeholder tokens standing for an image) and prompt
embeddings. Each block takes vLLM's own extra keys (its multimodal items'
identifiers and offsets, a digest of its embeddings), with a real kvshared
and the fake engine of test_vllm_connector.py.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import kvshare

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
import torch  # noqa: E402

from kvshare import _vllm_keys as keys  # noqa: E402
from test_vllm_connector import BS, engines, prompt, request, stats  # noqa: E402,F401

PLACEHOLDER = 151655  # one id for every image token, as vision-language models do


def image(identifier: str, offset: int, length: int) -> types.SimpleNamespace:
    """vllm.multimodal.inputs.MultiModalFeatureSpec as the connector reads it."""
    return types.SimpleNamespace(identifier=identifier, modality="image",
                                 mm_position=types.SimpleNamespace(offset=offset, length=length))


def mm_request(req_id: str, tokens: list[int], *features: types.SimpleNamespace,
               salt: str | None = None) -> types.SimpleNamespace:
    r = request(req_id, tokens, salt=salt)
    r.mm_features = list(features)
    return r


def embeds_request(req_id: str, embeds: torch.Tensor) -> types.SimpleNamespace:
    """A prompt of embeddings only: vLLM gives it no prompt_token_ids and
    zeros as all_token_ids."""
    n = embeds.shape[0]
    r = request(req_id, [0] * n, embeds=embeds)  # the fake engine counts these
    r.all_token_ids, r.num_prompt_tokens = [0] * n, n
    return r


def with_image(seed: int, offset: int, length: int) -> list[int]:
    """prompt(seed) (4 blocks and a token) with placeholders at [offset, offset + length)."""
    p = prompt(seed)
    p[offset: offset + length] = [PLACEHOLDER] * length
    return p


def layout(**over: object) -> kvshare.Layout:
    return kvshare.Layout(**{"model": "m", "layers": 2, "kv_heads": 2, "head_dim": 16,
                             "block_tokens": BS, "dtype": "fp32", **over})


def chain_of(c: kvshare.Client, req: types.SimpleNamespace) -> list[tuple[int, int]]:
    tokens = keys.prompt_tokens(req)
    n = len(tokens) // BS * BS
    h = keys.chain(c, tokens[:n], keys.block_extras(req, BS, n))
    return [(int(x["lo"]), int(x["hi"])) for x in h]


def test_text_only_keys_unchanged(daemon):
    """A request with no multimodal items and no embeddings has no extra keys
    and hashes as kvs_hash_tokens always has (pools published before stay
    valid): the chain is hash_tokens', and its first block is the value
    kvshare has always given it."""
    p = list(range(1, 2 * BS + 1))
    req = request("t", p)
    assert keys.block_extras(req, BS, len(p)) is None
    with kvshare.Client(daemon.socket, layout()) as c:
        got = chain_of(c, req)
        want = c.hash_tokens(p)
        assert got == [(int(x["lo"]), int(x["hi"])) for x in want]
    assert "%016x%016x" % (got[0][1], got[0][0]) == FIRST_TEXT_BLOCK


def test_image_keys_from_the_first_block_it_overlaps(daemon):
    """Same placeholder tokens, different images: the blocks before the image
    keep the text keys, every block from the first one the image overlaps
    differs (the image, then the chain). The same image gives the same keys;
    the same image one token later in its block gives other keys (vLLM keys
    the offset in the block too)."""
    p = with_image(1, BS + 3, 2 * BS)  # in blocks 1, 2 and 3
    with kvshare.Client(daemon.socket, layout()) as c:
        text = chain_of(c, request("t", p))
        a = chain_of(c, mm_request("a", p, image("img-a", BS + 3, 2 * BS)))
        a2 = chain_of(c, mm_request("a2", p, image("img-a", BS + 3, 2 * BS)))
        b = chain_of(c, mm_request("b", p, image("img-b", BS + 3, 2 * BS)))
        q = with_image(1, BS + 4, 2 * BS)
        moved = chain_of(c, mm_request("m", q, image("img-a", BS + 4, 2 * BS)))
    assert len(a) == 4
    assert a == a2
    assert a[0] == b[0] == text[0] == moved[0]
    assert all(a[i] != b[i] and a[i] != text[i] for i in range(1, 4))
    assert all(a[i] != moved[i] for i in range(1, 4))
    # Extra keys: the items overlapping each block, offsets relative to it.
    x = keys.block_extras(mm_request("a", p, image("img-a", BS + 3, 2 * BS)), BS, 4 * BS)
    assert x[0] == b"" and all(x[1:])
    assert keys._mm_keys([image("i", BS + 3, 2 * BS)], 3 * BS, 4 * BS) == [("i", 3 - 2 * BS)]
    assert keys._mm_keys([image("i", BS + 3, 2 * BS)], 0, BS) == []


def test_image_blocks_keyed_by_the_image(engines, daemon):
    """Through the connector: the same image and text load what another
    engine published (the whole prompt), another image with the same
    placeholder tokens loads only the text before it, and a text-only
    request of the same ids shares that text prefix too, nothing more."""
    p = with_image(2, BS + 3, 2 * BS)
    a, b = engines(), engines()
    assert a.run(mm_request("a1", p, image("img-a", BS + 3, 2 * BS)), 1.0) == (0, 1.0)
    assert b.run(mm_request("b1", p, image("img-a", BS + 3, 2 * BS)), 2.0) == (4 * BS, 1.0)
    before = stats(daemon.socket)["blocks.committed"]
    assert b.run(mm_request("b2", p, image("img-b", BS + 3, 2 * BS)), 3.0) == (BS, 1.0)
    # It published its own blocks 1..3 (keyed by img-b), not over img-a's.
    assert stats(daemon.socket)["blocks.committed"] == before + 3
    assert b.run(request("t", p), 4.0) == (BS, 1.0)
    # Engine A finds img-b's blocks B published (its first page: A's own
    # text block 0).
    assert a.run(mm_request("a2", p, image("img-b", BS + 3, 2 * BS)), 5.0) == (4 * BS, 1.0)


def test_two_images_in_one_block(daemon):
    """Two items in one block: both keyed, in order; swapping which image
    comes first changes the keys."""
    p = with_image(3, 2, 6)
    p[9:13] = [PLACEHOLDER] * 4
    ab = mm_request("ab", p, image("a", 2, 6), image("b", 9, 4))
    ba = mm_request("ba", p, image("b", 2, 6), image("a", 9, 4))
    with kvshare.Client(daemon.socket, layout()) as c:
        assert chain_of(c, ab)[0] != chain_of(c, ba)[0]
        assert chain_of(c, ab)[1:] != chain_of(c, ba)[1:]  # the chain carries it on
    assert keys._mm_keys(ab.mm_features, 0, BS) == [("a", 2), ("b", 9)]


def test_salted_image_keys_stay_in_the_salts_namespace(daemon):
    """Block 0 overlapping an image chains from the namespace's seed: a
    cache_salt (and any layout field) still tells two chains apart."""
    p = with_image(4, 0, BS)
    with kvshare.Client(daemon.socket, layout()) as c, \
            kvshare.Client(daemon.socket, layout(salt="s")) as s:
        r = mm_request("r", p, image("img", 0, BS))
        assert chain_of(c, r)[0] != chain_of(s, r)[0]


def test_prompt_embeds_keyed_by_their_digest(engines, daemon):
    """Prompt embeddings key each block by the SHA-256 of its rows (vLLM's
    extra key): the same embeddings load what another engine published,
    other embeddings (the same zero ids) miss from the first block that
    differs, and token ids never meet embeddings."""
    n = 4 * BS + 1
    emb = torch.randn(n, 64, generator=torch.Generator().manual_seed(1))
    other = emb.clone()
    other[2 * BS + 5] += 1.0  # block 2 differs
    a, b = engines(), engines()
    assert a.run(embeds_request("e1", emb), 1.0) == (0, 1.0)
    assert b.run(embeds_request("e2", emb), 2.0) == (4 * BS, 1.0)
    assert b.run(embeds_request("e3", other), 3.0) == (2 * BS, 1.0)
    assert b.run(request("ids", [0] * n), 4.0) == (0, 4.0)
    r = embeds_request("e", emb)
    r.prompt_token_ids = None  # as vLLM has it: the ids hashed are all_token_ids'
    assert keys.prompt_tokens(r) == [0] * n
    x = keys.block_extras(r, BS, 4 * BS)
    rows = emb[BS: 2 * BS].contiguous().view(torch.uint8).numpy().tobytes()
    import hashlib

    assert hashlib.sha256(rows).digest() in x[1]


def test_unkeyable_item_is_not_shared(engines, daemon):
    """A multimodal item with no identifier (vLLM always gives one) is
    neither looked up nor published: a miss, never a wrong hit."""
    p = with_image(5, 3, 4)
    e = engines()
    before = stats(daemon.socket)
    assert e.run(mm_request("u", p, image(None, 3, 4)), 1.0) == (0, 1.0)
    after = stats(daemon.socket)
    assert after["ops.reserve"] == before["ops.reserve"]
    assert after["blocks.committed"] == before["blocks.committed"]


# kvs_hash_tokens of tokens 1..16 under layout(): the value text-only blocks
# have always had (hash.c's chain), so pools published before keep hitting.
FIRST_TEXT_BLOCK = "bccbd46377d65154a1652c7ce3d16b8e"

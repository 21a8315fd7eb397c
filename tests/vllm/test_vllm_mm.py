"""vLLM end to end with a vision-language model (a tiny random LLaVA built
here: make_vl_model.py): engine A publishes an image+text prompt's KV
through kvshared; engine B, a fresh process, loads it for the same image
and text (its greedy tokens are A's) and, for another image behind the same
placeholder tokens, loads only the text block before the image (its tokens
differ).

Real parts only: the built kvshared, two vLLM (CPU) engines in their own
processes (started together, B's batch run after A's), the model built here. Neither engine uses vLLM's own prefix
cache (--no-prefix-cache), so every hit B has comes from kvshared.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import Engine, build_model, counters, start_daemon, stop_daemon  # noqa: E402

BS = 32           # the CPU attention backend takes multiples of 32
IMAGE_ID = 512       # make_vl_model.py's "<image>": the vocabulary's words, then it
IMAGE_TOKENS = 64    # (112 / 14)^2 placeholders an image
TEXT_BEFORE = 40     # the image starts in block 1: block 0 is text alone
TOKENS = 6           # generated


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm-vl-model") / "model"
    build_model(path, "make_vl_model.py")
    return path


def test_vllm_image_prompt_shared_by_its_image(tmp_path, vl_model):
    work = tmp_path
    rng = random.Random(3)
    ids = ([1] + [rng.randrange(4, 512) for _ in range(TEXT_BEFORE - 1)] + [IMAGE_ID]
           + [rng.randrange(4, 512) for _ in range(40)])
    img1 = {"prompt_token_ids": ids, "image_seed": 1}
    img2 = {"prompt_token_ids": ids, "image_seed": 2}
    # The prompt as the engine sees it: the placeholder expanded to the image's tokens.
    length = len(ids) - 1 + IMAGE_TOKENS
    full = (length - 1) // BS  # the blocks a hit can cover (one token is computed)
    sock = str(work / "kvshared.sock")
    daemon = start_daemon(sock, open(work / "kvshared.log", "w"))
    common = ["--socket", sock, "--block-size", str(BS), "--max-tokens", str(TOKENS),
              "--max-model-len", "512", "--no-prefix-cache"]
    engines: list[Engine] = []
    try:
        # Both start at once (their start is most of the time); B runs its
        # batch once A has published: the same image and text, and another
        # image behind the same tokens.
        a = Engine(work, vl_model, "a", [img1], *common, "--stats-file", str(work / "a"))
        b = Engine(work, vl_model, "b", [img1, img2], *common, "--stats-file", str(work / "b"),
                   "--go-file", str(work / "go"), "--wait-first")
        engines += [a, b]
        a.wait()
        want = a.rounds(1)[0][0]
        aw = counters(work / "a.worker")
        assert aw["published_blocks"] == length // BS and aw["daemon_errors"] == 0, aw
        (work / "go.0").touch()
        b.wait()
        got, other = b.rounds(1)[0]
        assert got == want, f"B {got} != A {want} with A's KV loaded"
        assert other != want, "another image, the same tokens out: the image was not used"
        # The first: every full block; the second: block 0 (text alone), its
        # image's blocks missed.
        bs, bw = counters(work / "b.scheduler"), counters(work / "b.worker")
        assert bs["hit_tokens"] == full * BS + BS, bs
        assert bw["loaded_blocks"] == full + 1 and bw["load_errors"] == 0, bw
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)

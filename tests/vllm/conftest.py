"""The tiny random model, built once for every vLLM test of the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from vllm_support import make_model

    path = tmp_path_factory.mktemp("vllm-model") / "model"
    make_model(path)
    return path

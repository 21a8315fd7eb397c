"""The tiny random models more than one test file runs, built once a session
(a pytest-xdist worker's)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from vllm_support import make_model

    path = tmp_path_factory.mktemp("vllm-model") / "model"
    make_model(path)
    return path


@pytest.fixture(scope="session")
def mla_model(tmp_path_factory):
    """The tiny DeepSeek-V2 (make_mla_model.py, MLA_LAYERS layers) of
    test_vllm_mla.py and test_vllm_tp.py."""
    from vllm_support import MLA_LAYERS, build_model

    path = tmp_path_factory.mktemp("vllm-mla-model") / "model"
    build_model(path, "make_mla_model.py", f"--layers={MLA_LAYERS}")
    return path

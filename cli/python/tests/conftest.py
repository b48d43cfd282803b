"""Test data for the Python package's tests: the repository they belong to and the shared
models beside it (../shared, which CI always has)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def models() -> pathlib.Path:
    path = SHARED / "models"
    if not path.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: CI must have ../shared beside the checkout")
        pytest.skip("../shared/models is not beside the checkout")
    return path

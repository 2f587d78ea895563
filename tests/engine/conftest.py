from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import make_checkout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path)

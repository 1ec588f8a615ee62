"""Shared fixtures: demo and tiny data caches, fabricated report campaigns."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from campaign_tree import HOSTILE, RunSpec, report_runs, write_campaign

from ebd2n.config import DataConfig, load_recipe
from ebd2n.data import Cache, prepare_cache

torch.set_num_threads(1)  # tests run on 2-core machines beside each other; results must not depend on it


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small embedded-corpus cache for the demo model, built once per test session."""
    directory = tmp_path_factory.mktemp("caches") / "demo"
    recipe = load_recipe(
        "demo",
        [f"data.cache_dir={directory}", "data.synthetic_train_bytes=400000", "data.synthetic_validation_bytes=40000"],
    )
    prepare_cache(recipe.data, recipe.model.vocab_size, progress=False)
    return directory


TINY_VOCAB = 300
"""Vocabulary of the tiny test caches: the 256 bytes, EOS and a few merges."""

TINY_DATA = {
    "synthetic_train_bytes": 200_000,
    "synthetic_validation_bytes": 20_000,
    "shard_tokens": 10_000,  # several shards, so blocks and windows cross shard boundaries
}
"""Settings of the tiny embedded-corpus caches (about 135k train and 14k validation tokens)."""


@pytest.fixture
def tiny_data(tmp_path: Path) -> Callable[..., DataConfig]:
    """Factory of tiny DataConfigs; the cache goes to tmp_path/cache unless cache_dir is given."""

    def make(**overrides: Any) -> DataConfig:
        overrides = {key: str(value) if isinstance(value, Path) else value for key, value in overrides.items()}
        return DataConfig(**({"cache_dir": str(tmp_path / "cache")} | TINY_DATA | overrides))

    return make


@pytest.fixture
def prepare_tiny() -> Callable[..., Cache]:
    """prepare_cache at the tiny vocabulary (or the one given), without progress bars."""

    def prepare(data: DataConfig, vocab_size: int = TINY_VOCAB) -> Cache:
        return prepare_cache(data, vocab_size, progress=False)

    return prepare


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Cache:
    """One tiny embedded-corpus cache, built once per session; tests must not modify it."""
    directory = tmp_path_factory.mktemp("data") / "tiny"
    return prepare_cache(DataConfig(cache_dir=str(directory), **TINY_DATA), TINY_VOCAB, progress=False)


@pytest.fixture(scope="session")
def report_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished, audited 24-run campaign with its report built once; tests must not modify it."""
    from ebd2n.report import build_report

    campaign = write_campaign(
        tmp_path_factory.mktemp("report"),
        "sweep",
        report_runs(),
        audit=True,
        purpose=f"purpose {HOSTILE}",
        description=f"description {HOSTILE}",
    )
    build_report(campaign)
    return campaign


@pytest.fixture(scope="session")
def curves_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report tests' 24-run campaign with every step recorded (30 per epoch), its report built once;
    tests must not modify it."""
    from ebd2n.report import build_report

    campaign = write_campaign(tmp_path_factory.mktemp("curves"), "sweep", report_runs(), steps_per_epoch=30)
    build_report(campaign)
    return campaign


@pytest.fixture
def campaign_tree(tmp_path: Path) -> Callable[..., Path]:
    """Factory: write the report tests' campaign (or the runs given) under tmp_path, with options."""

    def make(runs: list[RunSpec] | None = None, **options: Any) -> Path:
        return write_campaign(tmp_path, "sweep", report_runs() if runs is None else runs, **options)

    return make


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for a module's page tests (offline_browser: Debian's, never downloaded)."""
    from offline_browser import launch

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()

"""Data: text sources, tokenizers, token caches and the blocks that training and validation read.

The block readers need torch; they load on first use, so preparing a cache starts without it.
"""

from typing import Any

from ebd2n.data.cache import Cache, find_cache_identity, open_cache
from ebd2n.data.cache_build import build_cache
from ebd2n.data.cache_prepare import prepare_cache
from ebd2n.data.cache_verify import open_verified_cache, verify_cache
from ebd2n.data.sources import SPLITS, Source, open_source
from ebd2n.data.tokenizer import EOS_TOKEN, eos_id, obtain_tokenizer, train_bpe

_BLOCKS = ("BlockReader", "TokenStream", "eval_subset_indices", "iter_full_validation", "train_block_indices")

__all__ = [
    *_BLOCKS,
    "EOS_TOKEN",
    "SPLITS",
    "Cache",
    "Source",
    "build_cache",
    "eos_id",
    "find_cache_identity",
    "obtain_tokenizer",
    "open_cache",
    "open_verified_cache",
    "open_source",
    "prepare_cache",
    "train_bpe",
    "verify_cache",
]


def __getattr__(name: str) -> Any:
    if name in _BLOCKS:
        from ebd2n.data import blocks

        return getattr(blocks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

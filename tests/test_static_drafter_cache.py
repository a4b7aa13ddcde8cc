"""The drafter's static cache (remote.models.static_cache.StaticDrafterKV): one write a layer puts the new context and
the block in their rows, each row written once (padding context rows go to the spare row past `capacity`: on CUDA two
writes to one row in one `index_copy_` land in either order), and drafts through it equal drafts through the growing
cache (remote.models.drafter.DrafterCache), padded context included."""
from __future__ import annotations

import torch

from remote.decoding.loop import draft
from remote.models.static_cache import StaticDrafterKV
from tests.runner_fixtures import tiny_drafter, tiny_model


def test_begin_writes_each_row_once_and_shows_the_context_and_the_block():
    cache = StaticDrafterKV(1, 1, 4, 20, torch.float32, torch.device("cpu"))
    start, valid, block = 7, 2, 4
    context = torch.arange(3) + (start - valid)               # rows 5, 6, then a padding row at 7 (the block's start)
    cache.begin(torch.cat([context, torch.arange(block) + start]), 3)
    assert cache.slots.tolist() == [5, 6, 20, 7, 8, 9, 10]
    assert cache.visible.nonzero()[:, 1].tolist() == list(range(start + block))


def test_drafts_through_the_static_cache_equal_the_growing_cache():
    model = tiny_model("narrow", num_hidden_layers=3)
    drafter = tiny_drafter(model, block_size=8, layers=2)
    attn, width = drafter.layers[0].self_attn, drafter.fc.in_features
    static = StaticDrafterKV(len(drafter.layers), attn.num_kv, attn.head_dim, 40, torch.float32, torch.device("cpu"))
    growing = drafter.new_cache()
    features = torch.randn(1, 12, width, generator=torch.Generator().manual_seed(3))
    start = 0
    with torch.inference_mode():
        for step, new in enumerate([5, 3, 1, 3]):          # the prompt, then accepted rows as a step commits them
            root = torch.tensor([step + 2])
            context = features[:, start:start + new]
            want = draft(drafter, model, growing, context, root, start + new)
            start += new
            if step == 0:
                got = draft(drafter, model, static, context, root, torch.tensor(start))
            else:                                            # a full block of rows, the first `new` real
                padded = torch.cat([context, torch.full((1, drafter.block_size - new, width), 7.0)], dim=1)
                got = draft(drafter, model, static, padded, root, torch.tensor(start), torch.tensor(new))
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)

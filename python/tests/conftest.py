import os
import random
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def seed(request):
    """A fresh seed per test (printed; KDA_SEED=<seed> replays it)."""
    s = int(os.environ.get("KDA_SEED", random.SystemRandom().randrange(2**31)))
    torch.manual_seed(s)
    print(f"\n[{request.node.name}] seed {s} (replay: KDA_SEED={s})")
    return s


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param

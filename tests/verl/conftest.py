"""tests/verl runs in the verl virtualenv (`make test-verl`); elsewhere it is not collected."""

import importlib.util
import tempfile

import pytest

collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["test_*.py"]

if importlib.util.find_spec("torch") is not None:
    import torch

    # tiny models, as in tests/conftest.py (which this suite does not load): one intra-op thread;
    # on a loaded 2-core machine a second thread's pool barriers cost CPU and gain nothing
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _fresh_hook_state():
    """Each test sees the GMTS hook's process state as a new worker would."""
    if importlib.util.find_spec("verl") is None:
        yield
        return
    import gmts_core.integrations.verl  # noqa: F401  (registers the GMTS losses, installs the hook)
    from gmts_core.integrations import verl_compat as compat

    saved = compat.STATE
    compat.STATE = compat.HookState()
    yield
    compat.STATE = saved


@pytest.fixture(scope="module")
def process_group():
    """A one-process gloo group (train_mini_batch all-gathers token counts over DP)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = tempfile.NamedTemporaryFile(delete=False).name
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()

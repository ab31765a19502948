"""Shared pytest fixtures."""

import numba
import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(scope="module")
def single_threaded():
    """Run a module's numba kernels and BLAS calls on one thread.

    The tests train on a few thousand rows, where starting and synchronising
    worker threads costs more than the work; on a shared two-core machine that
    oversubscription made the LightGBM and scikit-learn tests ~15x slower.
    Results do not depend on the thread count.
    """
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    with threadpool_limits(limits=1):
        yield
    numba.set_num_threads(before)

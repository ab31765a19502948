"""Shared pytest fixtures."""

import numba
import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True)
def _in_a_temporary_folder(tmp_path, monkeypatch):
    """Run every test in its own temporary folder: nothing it writes lands in the checkout."""
    monkeypatch.chdir(tmp_path)


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


@pytest.fixture
def chain_passes(monkeypatch):
    """The ``keep_messages`` of every pass the chain transition problems run, in order.

    Records the calls of :func:`structboost.inference.chain.posterior` made by
    :mod:`structboost.transitions.chain` (each one message pass).
    """
    from structboost.transitions import chain as chain_transitions

    kept = []
    real = chain_transitions.posterior

    def recording(*args, keep_messages=True, **kwargs):
        kept.append(keep_messages)
        return real(*args, keep_messages=keep_messages, **kwargs)

    monkeypatch.setattr(chain_transitions, "posterior", recording)
    return kept

"""Transition potentials and their solvers: the penalised problem, chain and tree
solvers (the ``"majorize"`` solver bounds with :mod:`structboost.majorize`)."""

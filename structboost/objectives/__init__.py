"""Boosting objectives (numpy only): node potentials and structure in, G and H out.

One :class:`~.base.NodeObjective` holds the modes and the Hessian; the chain
(:mod:`.chain`) and tree (:mod:`.tree`) objectives supply the structure;
:mod:`.params` declares the objective's settings once (:class:`~.params.ObjectiveSpec`).
"""

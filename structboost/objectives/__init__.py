"""Boosting objectives: node potentials and structure in, G and H out.

One round (:class:`~.round.NodeObjective`) holds the modes and the Hessian,
on the host or a GPU's arrays (:mod:`.gpu`); the chain (:mod:`.chain`) and
tree (:mod:`.tree`) objectives supply the structure; :mod:`.params`
declares the objective's settings once (:class:`~.params.ObjectiveSpec`).
"""

"""Transition potentials and their solvers: the penalised problem, chain and tree
solvers, and the Jebara & Choromanska (2012) majorization bound."""

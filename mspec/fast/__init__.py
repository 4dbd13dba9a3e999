"""The same laws, faster: fast paths of schemes whose readable reference is in :mod:`mspec.schemes`.

Each module here computes what a reference computes, by other means, and the tests run
both on the same inputs:

* :mod:`~mspec.fast.spectr_newton`: SpecTr's ``rho*`` by a band of breakpoints and a
  bracketed Newton iteration (reference: the paper's bisection, :mod:`mspec.schemes.spectr`).
* :mod:`~mspec.fast.optimal_selection`: the exactly optimal selection at vocabulary scale,
  certified piece by piece (reference: :mod:`mspec.schemes.optimal_reference`).
* :mod:`~mspec.fast.importance_ratio`: our variant of the paper's IS scheme (``"is-ratio"``):
  the paper's pieces (:mod:`mspec.schemes.importance`) with a ratio priority, a deficit rule
  and ratio bins instead of a sort. Its law is its own; like every scheme it outputs ``q``.

:mod:`mspec.registry` sits above both rooms: ``make_scheme("spectr")`` and
``make_scheme("optimal")`` build the fast paths.
"""

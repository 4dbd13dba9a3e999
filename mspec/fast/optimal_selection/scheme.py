"""The exactly optimal scheme ``"optimal"``: the smallest key wins, then one single-draft step.

**2. Selection by random keys.** Give each draft a random *key* in ``[0, 1]`` and select
the draft with the smallest key. If the key of a draft of token ``t`` is uniform on a set
``M_t`` of length ``p_t``, and the sets ``M_t`` tile ``[0, 1]``, every key is uniform on
``[0, 1]`` and token ``t`` is selected with probability

    x(t) = integral over M_t of  K (1 - y)^(K-1) dy  =  nu(M_t),

the ``nu``-measure of ``M_t`` (``nu`` has distribution function ``g``). So realising
``x`` is a tiling problem: find sets ``M_t`` with length ``p_t`` and ``nu``-mass ``x_t``.

**Certified, with an exact fallback.** What the fast path builds is checked before any key
is drawn from it (``PoolPiece.certify``, vectorised): every piece of slots and a pool,
and fact 6's spread, must have finite slot edges, keys that stay uniform and every atom's
``nu``-mass ``x``, to ``CERTIFY_TOLERANCE`` (absolute ``nu``-measure; a piece that solves its
edges lazily, by its ends and then atom by atom as they are used). Where rounding breaks
it (a tiny ill-conditioned piece, powers that underflow near key 1, a root that did not
converge) the piece falls back to the greedy tiling, checked in full, and the spread to
fact 5; each fallback is recorded in ``OptimalSelection.fallbacks``. If even the greedy
fails its check, :class:`~mspec.schemes.selection.SchemeError` -- never a silently wrong law.

Exactness: the output law is exactly ``q`` (single-draft speculative sampling from the
induced ``x``) and the acceptance is the closed-form optimum, as far as the key laws realise
``x``. Keys are floats in ``[0, 1]``, which resolve ~1e-16 of their size, and that is the
guarantee, for both tilings: a token of a piece that ends at key ``e`` has a key law of
length ``p_t`` to within ``8 eps e`` and of ``nu``-mass ``x_t`` to within ``32 K eps e``
(``eps = 2^-52``; plus ``16 K 2^-1074`` at subnormal values, or 1e-300 where some
``0 < q_t < 1e-290``). So a piece low in key space (large ``q/p``: e.g. the tokens of tiny
``p`` under a draft colder than the target) is exact relative to its own tokens, and near
key 1 the error is ~1e-15 absolute. A token whose ``p_t`` is below the spacing of the keys
where it lies (~1e-16 near key 1) can get a law of float length 0 (the greedy: a point),
selected with about ``p_t h(point) ~ x_t``. Non-identical drafts are not covered: ``f`` is
then ``1 - prod_i (1 - p_i(A))``, not a function of one additive mass, and uniform keys
cannot reach its polytope (book section); use ``"optimal-lp"`` (small V) or ``"is-ratio"``.

"""

from __future__ import annotations

import numpy as np

from mspec.schemes.two_step import TwoStepScheme
from mspec.fast.optimal_selection.atoms import Atoms
from mspec.fast.optimal_selection.greedy import CERTIFY_TOLERANCE, GreedyPiece
from mspec.fast.optimal_selection.options import DEFAULT, FastPath
from mspec.fast.optimal_selection.pieces import certified_pool_piece, certify_atom_before_use
from mspec.fast.optimal_selection.pool import PoolPiece
from mspec.schemes.optimal_reference import ReferenceOptimalSelection
from mspec.fast.optimal_selection.runs import RunPiece

#: how pieces are realised: "pool" (slots and a shared pool, vectorised; the greedy where
#: that is not valid) or "greedy" (always the greedy tiling)
TILINGS = ("pool", "greedy")


#: what the atoms of the selection are: "tokens" (the lexicographically optimal x),
#: "buckets" (ratio buckets where that keeps the optimum, fact 5) or "auto"
ATOMS = ("auto", "tokens", "buckets")


#: "auto" uses buckets from this vocabulary size on (below it sorting is cheap anyway)
BUCKET_MIN_VOCAB = 4096


class OptimalSelection(TwoStepScheme):
    """Exactly optimal selection for K identical drafts at any vocabulary size.

    Acceptance equals the closed-form optimum ``min_S [q(S) + 1 - p(S)^K]``; the output
    law is exactly the target. A :class:`~mspec.schemes.two_step.TwoStepScheme`: this class
    says how the smallest key selects (step 1), the base class does the single-draft step
    from ``x`` to ``q``. :meth:`reference` builds the construction to read
    (:mod:`~mspec.schemes.optimal_reference`).

    Args:
        draft: ``(V,)`` draft distribution ``p`` (K identical drafts; ``(K, V)`` with equal
            rows is accepted).
        target: ``(V,)`` target distribution ``q``.
        num_drafts: K.
        tiling: how each piece's key laws are built: ``"pool"`` (default: slots and a
            shared pool, vectorised, with the greedy as the fallback) or ``"greedy"``
            (the greedy tiling by sets, token by token; used by the book to teach it).
        atoms: what shares a key law: ``"tokens"`` (each token its own atom: ``x`` is the
            lexicographically optimal induced distribution of fact 1, which needs a sort of
            the vocabulary), ``"buckets"`` (tokens whose ``q/p`` agree to 6 bits share one,
            except next to ``x = q``, where tokens are split out and solved exactly; same
            optimal acceptance, a different optimal ``x``; fact 5) or ``"auto"`` (the
            default: buckets from V = 4096 on).

        certify_tolerance: the fast path certifies what it builds (every piece of slots and a
            pool, and fact 6's spread: finite slot edges, keys that stay uniform and every
            atom's ``nu``-mass ``x``, to this absolute ``nu``-measure; default
            ``CERTIFY_TOLERANCE``). What fails falls back to an exact slower path -- the
            greedy tiling for the piece (itself checked in full, at ``GREEDY_CERTIFY_FACTOR *
            CERTIFY_TOLERANCE``; if even that fails, :class:`~mspec.schemes.selection.SchemeError`),
            fact 5 for the spread -- and is recorded in ``fallbacks``. A negative value fails
            every certificate, i.e. forces the fallbacks (for tests).
        fast: the fast path's switches (:class:`~mspec.fast.optimal_selection.FastPath`); every
            setting gives the same output law.

    Attributes:
        atoms: the atoms (``masses``, ``x``, ``blocks``, ``top``, ``bucket_atoms``,
            ``token_atoms``).
        blocks: block (piece) starts over the atoms.
        top: draft mass before each atom.
        fallbacks: ``list[str]``, one line per fast-path result that failed its certificate
            and was replaced by the exact slower path (empty in the usual case; benches
            count it). It grows as pieces are built, lazily, by ``sample``/``key_fragments``.
    """

    name = "optimal"
    supports_non_identical = False

    def __init__(self, *, draft, target, num_drafts=None, tiling: str = "pool", atoms: str = "auto",
                 certify_tolerance: float = CERTIFY_TOLERANCE, fast: FastPath = DEFAULT):
        if tiling not in TILINGS:
            raise ValueError(f"tiling must be one of {TILINGS}, got {tiling!r}")
        if atoms not in ATOMS:
            raise ValueError(f"atoms must be one of {ATOMS}, got {atoms!r}")
        if not isinstance(fast, FastPath):
            raise TypeError(f"fast must be a mspec.fast.optimal_selection.FastPath, got {type(fast).__name__}")
        self.tiling, self.fast = tiling, fast
        self.certify_tolerance = float(certify_tolerance)
        self.fallbacks: list[str] = []
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        k = self.num_drafts
        p, q = self.draft, self.target
        built = None
        if atoms == "buckets" or (atoms == "auto" and self.vocab_size >= BUCKET_MIN_VOCAB):
            built = Atoms.buckets(p, q, k, self.fallbacks, self.certify_tolerance, fast)
        if built is not None and not (built.x.min() >= 0.0 and built.x.max() < np.inf):  # (NaN fails too)
            self.fallbacks.append("buckets -> tokens: an atom's x is not finite and >= 0")
            built = None
        self.atoms = built if built is not None else Atoms.tokens(p, q, k)
        self.blocks, self.top = self.atoms.blocks, self.atoms.top
        self._pieces: dict[int, GreedyPiece] = {}
        if self.atoms.spread is not None:  # fact 6: its one piece is already built
            self._pieces[0] = self.atoms.spread.piece
        # tokens drafted but never in the target come last, each its own interval
        # (their x does not matter: min(q, x) = 0 and the residual is 0 there)
        if self.atoms.positive:  # (known from the buckets: no q = 0)
            self.rest = np.zeros(0, dtype=np.int64)
        else:
            self.rest = np.flatnonzero((p > 0) & (q == 0)) if not q.all() else np.zeros(0, dtype=np.int64)
        self.rest_top = self.top[-1] + np.concatenate([[0.0], np.cumsum(p[self.rest])])
        self._rest_pos = {int(t): i for i, t in enumerate(self.rest)}
        self._induced_cache = None  # built at the first rejection (or when asked)

    @staticmethod
    def reference(*, draft, target, num_drafts=None) -> ReferenceOptimalSelection:
        """The reference construction, the one to read
        (:mod:`~mspec.schemes.optimal_reference`: plain floats, every token its own
        key set, each piece tiled greedily token by token). The same output law and
        acceptance as the fast path; the tests use it as the fast path's oracle."""
        return ReferenceOptimalSelection(draft=draft, target=target, num_drafts=num_drafts)

    # --- lazily built V-long arrays -----------------------------------------------------
    @property
    def rank(self) -> np.ndarray:
        """``(V,)`` the atom of each token (-1 where ``p = 0`` or ``q = 0``)."""
        return self.atoms.ranks()

    @property
    def order(self) -> np.ndarray:
        """Tokens in ``q/p``-descending order, one per atom (``atoms="tokens"`` only)."""
        if not hasattr(self.atoms, "order"):
            raise AttributeError("`order` lists one token per atom: build the scheme with atoms='tokens'")
        return self.atoms.order

    @property
    def induced(self) -> np.ndarray:
        """``(V,)`` the induced distribution ``x = p_I`` of the selection step."""
        if self._induced_cache is None:
            induced = self.atoms.token_x()
            if self.rest.size:  # nu of each rest interval [a, b]: (1 - a)^K (1 - (1 - (b - a) / (1 - a))^K)
                ends = np.minimum(self.rest_top, 1.0)
                room = 1.0 - ends[:-1]
                with np.errstate(divide="ignore", invalid="ignore"):  # (no cancellation near key 0)
                    share = np.log1p(-np.diff(ends) / room)
                induced[self.rest] = np.where(room > 0.0, -(room**self.num_drafts) * np.expm1(self.num_drafts * share), 0.0)
            self._induced_cache = induced
        return self._induced_cache

    def induced_at(self, token: int) -> float:
        """``x`` of one token without building the V-long ``induced``."""
        if self._induced_cache is not None:
            return float(self._induced_cache[token])
        if self.atoms.spread is not None:  # fact 6: x = q
            return float(self.target[token])
        a = self.atoms.atom_of(token)
        if a >= 0:
            mass = self.atoms.masses[a]
            return float(self.atoms.x[a] if mass == self.draft[token] else self.draft[token] * self.atoms.x[a] / mass)
        return float(self.induced[token])

    # --- key sets --------------------------------------------------------------------
    def _piece_args(self, j: int):
        """``(masses, x, start, K)`` of piece ``j``: its atoms and where its keys start."""
        a, b = self.blocks[j], self.blocks[j + 1]
        return self.atoms.masses[a:b], self.atoms.x[a:b], self.top[a], self.num_drafts

    def _piece(self, j: int):
        """The key laws of piece ``j``, built at first use: the greedy tiling (fact 3), or
        on the fast path slots and a pool, certified, with the greedy as the fallback."""
        if j not in self._pieces:
            if self.tiling == "pool":
                self._pieces[j] = certified_pool_piece(self, j)
            else:
                self._pieces[j] = RunPiece(*self._piece_args(j))
        return self._pieces[j]

    def _locate(self, token: int, check: bool = True):
        """``(piece, local atom, atom)`` of a ranked token, else ``None``. With ``check`` the
        piece is built and the atom's key law certified before it is used."""
        a = self.atoms.atom_of(token)
        if a < 0:
            return None
        if self.blocks.size == 2:  # one piece (fact 6 always)
            j, i = 0, a
        else:
            j = int(self.blocks.searchsorted(a, side="right")) - 1
            i = int(a - self.blocks[j])
        if check:
            certify_atom_before_use(self, j, i, a)
        return j, i, a

    def key_fragments(self, token: int) -> list[tuple[float, float, float]]:
        """The key law of ``token``: intervals ``(start, end, weight)`` of ``[0, 1]``.

        A draft of ``token`` gets its key with density ``weight / p_t`` on each interval;
        ``weight`` is the share of the keys there that belong to the token (1 on a set of
        the greedy tiling and on a slot of a single-token atom, less on a pool or a bucket
        shared with other tokens). Empty if ``p_t = 0``.
        """
        where = self._locate(token)
        if where is not None and self.atoms.spread is not None:  # fact 6: the token's own split
            return self.atoms.spread.fragments(int(token), where[2], float(self.draft[token]),
                                               float(self.target[token]))
        if where is not None:
            j, i, a = where
            mass = float(self.atoms.masses[a])
            share = float(self.draft[token]) / mass
            return [(s, e, w * share) for s, e, w in self._piece(j).fragments(i, mass)]
        pos = self._rest_pos.get(int(token), -1)
        if pos >= 0:
            return [(float(self.rest_top[pos]), float(self.rest_top[pos + 1]), 1.0)]
        return []

    def realisation(self, token: int) -> str:
        """How ``token``'s key law is built: ``"pool"`` (slots and a pool), ``"greedy"``
        (greedy tiling), ``"rest"`` (``q_t = 0``: one interval after everything else) or
        ``"none"`` (``p_t = 0``: never drafted)."""
        where = self._locate(token)
        if where is not None:
            return "pool" if isinstance(self._piece(where[0]), PoolPiece) else "greedy"
        return "rest" if int(token) in self._rest_pos else "none"

    def _sample_key(self, token: int, uniform: float) -> float:
        where = self._locate(token)
        if where is not None and self.atoms.spread is not None:
            return self.atoms.spread.sample_key(int(token), where[2], float(self.draft[token]),
                                                float(self.target[token]), uniform)
        if where is not None:
            j, i, a = where
            return self._piece(j).sample_key(i, float(self.atoms.masses[a]), uniform)
        pos = self._rest_pos[int(token)]
        return float(self.rest_top[pos] + uniform * (self.rest_top[pos + 1] - self.rest_top[pos]))

    # --- step 1: the smallest key wins (step 2 is TwoStepScheme's) -------------------
    def selection_probabilities(self, tokens: np.ndarray) -> np.ndarray:
        """Exact P(draft i has the smallest key), shape ``(K,)``, for validated ``tokens``.

        ``integral f_i(y) prod_{j != i} (1 - F_j(y)) dy`` with piecewise-constant key
        densities: exact by Gauss-Legendre with K nodes between breakpoints. Each token's
        law is taken as it is realised (what ``sample`` draws from), normalised by its
        realised mass -- float keys near 1 resolve only ~1e-16, so a tiny ``p_t`` is realised
        with a relative error -- and as masses per interval between breakpoints, never as a
        density (which overflows for a subnormal ``p_t``). A law of zero realised mass (``p_t``
        below the resolution of the keys) is a point mass at its start; drafts tied at one
        point share it evenly.
        """
        k = tokens.size
        unique, counts = np.unique(tokens, return_counts=True)
        for t in unique:  # every key law certified before any is read
            self._locate(int(t))
        laws, points = self._realised_laws(unique)
        cuts = np.unique(np.concatenate([f[:, :2].ravel() for f in laws if f is not None] + [points[~np.isnan(points)]]))
        left, right = cuts[:-1], cuts[1:]
        width = right - left
        nodes, weights = np.polynomial.legendre.leggauss(max(k, 1))
        tau = 0.5 * (nodes + 1.0)  # node positions inside each interval, in [0, 1]
        # survival[u]: P(key of token u > y) at every node of every interval, (M, N)
        survival = np.ones((unique.size, left.size, tau.size))
        mass = np.zeros((unique.size, left.size))
        before_cut = np.zeros((unique.size, cuts.size))  # F_u at each cut
        for u, frag in enumerate(laws):
            if frag is None:  # a point mass: the key exceeds y below the point only
                survival[u] = (right <= points[u])[:, None]
                continue
            # (by the interval's ends, all of them cuts: the float midpoint of a one-ulp
            # interval is one of its ends, and a fragment that short then held nothing)
            inside = (left[:, None] >= frag[None, :, 0]) & (right[:, None] <= frag[None, :, 1])
            m = (inside * frag[None, :, 2]).sum(axis=1) * width
            m /= m.sum()
            mass[u] = m
            before_cut[u, 1:] = np.minimum(np.cumsum(m), 1.0)
            survival[u] = 1.0 - (before_cut[u, :-1, None] + m[:, None] * tau[None, :])
        cont = np.array([f is not None for f in laws])
        probs_of = np.zeros(unique.size)
        for u in range(unique.size):
            if cont[u]:
                others = np.ones((left.size, tau.size))
                for v in range(unique.size):
                    c = counts[v] - (v == u)
                    if c:
                        others *= survival[v] ** c
                probs_of[u] = float(np.sum(mass[u] * (others @ (0.5 * weights))))
            else:
                probs_of[u] = self._point_wins(u, points, cont, counts, cuts, before_cut)
        return probs_of[np.searchsorted(unique, tokens)]

    def selection_law(self, tokens: np.ndarray) -> dict[int, float]:
        """P(select token y | drafted ``tokens``) as ``{y: probability}`` (validated tokens):
        :meth:`selection_probabilities` summed over the drafts holding each token, as
        :meth:`mspec.schemes.two_step.TwoStepScheme.selection_law` gives it."""
        law: dict[int, float] = {}
        for y, prob in zip(tokens.tolist(), self.selection_probabilities(tokens)):
            law[int(y)] = law.get(int(y), 0.0) + float(prob)
        return law

    def _realised_laws(self, unique: np.ndarray):
        """Each token's key law as realised: ``(n, 3)`` rows ``(start, end, weight)`` scaled to
        a largest weight of 1, or ``None`` with its point in ``points`` when the law has no
        realised mass (``p_t`` below the resolution of the keys)."""
        laws, points = [], []
        for t in unique:
            frag = np.array(self.key_fragments(int(t)), dtype=float).reshape(-1, 3)
            w_max = float(frag[:, 2].max()) if frag.size else 0.0
            if w_max > 0.0 and np.isfinite(w_max):
                frag[:, 2] /= w_max  # (scaled: no overflow or underflow of weight x length)
            realised = float(np.sum(frag[:, 2] * (frag[:, 1] - frag[:, 0]))) if w_max > 0.0 else 0.0
            keep = np.isfinite(realised) and realised > 0.0
            laws.append(frag if keep else None)
            points.append(np.nan if keep else (float(frag[:, 0].min()) if frag.size else 1.0))
        return laws, np.array(points)

    @staticmethod
    def _point_wins(u, points, cont, counts, cuts, before_cut) -> float:
        """P(the key of point-law token ``u`` is the smallest): no point of another draft
        before it and no continuous key below it; drafts tied at one point share it."""
        at = points[u]
        if np.any(points[~cont] < at):
            return 0.0
        tied = counts[~cont][points[~cont] == at].sum()
        index = int(np.searchsorted(cuts, at))
        beyond = np.prod((1.0 - before_cut[cont, index]) ** counts[cont])
        return float(beyond) / tied

    def select(self, tokens, rng: np.random.Generator) -> int:
        """Step 1: the drafted token with the smallest key (validated ``tokens``)."""
        # pieces own consecutive key intervals, so only the drafts in the first piece that
        # any draft reaches can have the smallest key (rest tokens: one piece each, last)
        where = [self._locate(int(t), check=False) for t in tokens]
        n_pieces = self.blocks.size - 1
        piece = [w[0] if w is not None else n_pieces + self._rest_pos[int(t)] for w, t in zip(where, tokens)]
        first = min(piece)
        contenders = [i for i, j in enumerate(piece) if j == first]
        if len(contenders) == 1 or all(tokens[i] == tokens[contenders[0]] for i in contenders):
            i = contenders[0]  # (drafts of one token: any of them is that token)
        else:
            for i in contenders:  # every key law certified before any key is drawn from one
                certify_atom_before_use(self, *where[i])  # (in a piece of atoms: where[i] is known)
            keys = [self._sample_key(int(tokens[i]), rng.random()) for i in contenders]
            i = contenders[int(np.argmin(keys))]
        return int(tokens[i])

"""Fast path: one piece's key laws by slots and a pool, certified before use, with the
greedy tiling as the exact fallback (each fallback recorded in the scheme's ``fallbacks``).

A piece of at most :data:`~mspec.fast.optimal_selection.pool.ALL_EDGES_BELOW` atoms solves all its
slot edges at once and is certified in full (:meth:`PoolPiece.certify`); a larger one solves
edges lazily, is certified by its ends, and then atom by atom, before any key is drawn from
that atom (:meth:`PoolPiece.certify_atom`). Whatever fails is replaced by the greedy,
itself checked in full; if even that fails, :class:`~mspec.schemes.selection.SchemeError`.
"""

from __future__ import annotations

from mspec.schemes.selection import SchemeError
from mspec.fast.optimal_selection.greedy import certify_greedy
from mspec.fast.optimal_selection.pool import ALL_EDGES_BELOW, PoolPiece
from mspec.fast.optimal_selection.runs import RunPiece


def certified_pool_piece(rule, j: int):
    """Piece ``j`` of ``rule`` (an ``OptimalSelection``) by slots and a pool, certified;
    the greedy where slots and a pool cannot serve it or fail the certificate."""
    args = rule._piece_args(j)
    # (one Newton iteration for every edge beats two for the suspects, up to a size)
    piece = PoolPiece.build(*args, all_edges=args[0].size <= ALL_EDGES_BELOW)
    if piece is None:
        return RunPiece(*args)
    # (its tiled groups' pieces are certified as they are built)
    piece.notes, piece.tolerance, piece.max_depth = rule.fallbacks, rule.certify_tolerance, rule.fast.max_depth
    piece.lazy = not (piece.front.solved and piece.back.solved)  # (then: atom by atom)
    if piece.lazy:
        piece.checked = set()
        why = piece.certify_ends(rule.certify_tolerance)
    else:
        why = piece.certify(*args[:2], tolerance=rule.certify_tolerance)
    return piece if why is None else greedy_instead(rule, j, why)


def certify_atom_before_use(rule, j: int, i: int, a: int) -> None:
    """Build piece ``j`` and, in a piece built lazily, certify its local atom ``i`` (atom
    ``a``) once, replacing the piece by the greedy if that fails."""
    piece = rule._piece(j)
    if piece.__class__ is PoolPiece and piece.lazy and i not in piece.checked:
        why = piece.certify_atom(i, float(rule.atoms.masses[a]), float(rule.atoms.x[a]), rule.certify_tolerance)
        if why is None:
            piece.checked.add(i)
        else:
            rule._pieces[j] = greedy_instead(rule, j, f"atom {i}: {why}")


def greedy_instead(rule, j: int, why: str):
    """Piece ``j`` failed its certificate (``why``): the greedy tiling instead, checked in
    full, and recorded; a :class:`SchemeError` if even that fails."""
    args = rule._piece_args(j)
    rule.fallbacks.append(f"piece {j} ({args[0].size} atoms): slots and pool -> greedy: {why}")
    piece = RunPiece(*args)
    failed = certify_greedy(piece, *args[:2])
    if failed is not None:
        raise SchemeError(rule._bug(
            f"key laws it could not certify (piece {j}: {why}; the greedy fallback: {failed}); "
            "atoms='tokens', tiling='greedy' may serve this pair"))
    return piece

"""mspec: multi-draft speculative sampling, from the paper to running code.

Reference: Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, "Multi-Draft Speculative
Sampling: Canonical Decomposition and Theoretical Limits", ICLR 2025 (arXiv 2410.18234).
The paper writes the draft distribution as ``p`` and the target as ``q``; every public
function here takes them as ``draft=`` and ``target=``.

Token level (numpy/scipy) is imported here; the sequence level (torch + transformers)
lives in :mod:`mspec.models`, :mod:`mspec.decoding`, :mod:`mspec.data` and
:mod:`mspec.metrics`, imported explicitly so ``import mspec`` stays light.
"""

from .canonical import CanonicalScheme, solve_canonical_lp
from .closed_form import acceptance_is_one, optimal_acceptance
from .distributions import check_distribution, distribution_from_logits
from .exact import output_distribution
from .figures import figure2_curves
from .importance import ImportanceSampling
from .lp import LPFallbackWarning, LPSolveError
from .optimal import OptimalLP, solve_optimal_lp
from .optimal_selection import OptimalSelection, lex_optimal_induced
from .registry import SCHEMES, get_scheme, make_scheme
from .selection import SchemeError, Selection, SelectionScheme
from .two_step import TwoStepScheme
from .single import SingleDraft, single_draft_acceptance, single_draft_sample
from .specinfer import SpecInfer, specinfer_acceptance, specinfer_sample
from .spectr import SpecTr, spectr_acceptance, spectr_sample

__version__ = "0.1.0"

# Sequence-level names, imported on first use so that `import mspec` needs no torch.
_LAZY = {
    "speculative_generate": "decoding",
    "autoregressive_generate": "decoding",
    "generate_with_baselines": "decoding",
    "expected_round_tokens": "decoding",
    "GenerationResult": "decoding",
    "load_pair": "models",
    "make_pair": "models",
    "ModelPair": "models",
    "load_prompts": "data",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mspec' has no attribute {name!r}")

__all__ = [
    "CanonicalScheme",
    "ImportanceSampling",
    "LPFallbackWarning",
    "LPSolveError",
    "OptimalLP",
    "OptimalSelection",
    "SCHEMES",
    "SchemeError",
    "Selection",
    "SelectionScheme",
    "SingleDraft",
    "SpecInfer",
    "SpecTr",
    "TwoStepScheme",
    "acceptance_is_one",
    "check_distribution",
    "distribution_from_logits",
    "get_scheme",
    "make_scheme",
    "figure2_curves",
    "lex_optimal_induced",
    "optimal_acceptance",
    "output_distribution",
    "single_draft_acceptance",
    "solve_canonical_lp",
    "solve_optimal_lp",
    "single_draft_sample",
    "specinfer_acceptance",
    "specinfer_sample",
    "spectr_acceptance",
    "spectr_sample",
]

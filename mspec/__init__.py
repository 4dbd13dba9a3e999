"""mspec: multi-draft speculative sampling, from the paper to running code.

Reference: Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, "Multi-Draft Speculative
Sampling: Canonical Decomposition and Theoretical Limits", ICLR 2025 (arXiv 2410.18234).
The paper writes the draft distribution as ``p`` and the target as ``q``; every public
function here takes them as ``draft=`` and ``target=``.

Token level (numpy/scipy) is imported here; the sequence level (torch + transformers)
lives in :mod:`mspec.lm.models`, :mod:`mspec.lm.decoding` and :mod:`mspec.lm.custom_generate`
(``mspec.multi_draft_sampling``, for ``generate(custom_generate=...)``), imported on first use so
``import mspec`` stays light.
"""

from mspec.distributions import distribution_from_logits
from mspec.fast.importance_ratio import RatioImportanceSampling
from mspec.fast.optimal_selection import OptimalSelection, lex_optimal_induced
from mspec.fast.spectr_newton import NewtonSpecTr
from mspec.registry import SCHEMES, get_scheme, make_scheme
from mspec.schemes.canonical import CanonicalScheme, solve_canonical_lp
from mspec.schemes.closed_form import acceptance_is_one, optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.schemes.importance import ImportanceSampling
from mspec.schemes.lp import LPFallbackWarning, LPSolveError
from mspec.schemes.optimal_lp import OptimalLP, solve_optimal_lp
from mspec.schemes.optimal_reference import ReferenceOptimalSelection
from mspec.schemes.selection import SchemeError, Selection, SelectionScheme, SlowSchemeWarning
from mspec.schemes.single import SingleDraft, single_draft_acceptance, single_draft_sample
from mspec.schemes.specinfer import SpecInfer, specinfer_acceptance, specinfer_sample
from mspec.schemes.spectr import SpecTr, spectr_acceptance, spectr_sample
from mspec.schemes.two_step import TwoStepScheme

__version__ = "0.1.0"

# Sequence-level names, imported on first use so that `import mspec` needs no torch.
_LAZY = {
    "speculative_generate": "mspec.lm.decoding",
    "autoregressive_generate": "mspec.lm.decoding",
    "generate_with_baselines": "mspec.lm.decoding",
    "expected_round_tokens": "mspec.lm.decoding",
    "GenerationResult": "mspec.lm.decoding",
    "multi_draft_sampling": "mspec.lm.custom_generate",
    "make_pair": "mspec.lm.models",
    "ModelPair": "mspec.lm.models",
}


#: public names that were renamed -> what to use now
_RENAMED = {"PaperImportanceSampling": "mspec.ImportanceSampling (the paper's IS scheme, 'is'); our variant is "
                                       "mspec.RatioImportanceSampling ('is-ratio')",
            "figure2_curves": "mspec_lab.figure2.figure2_curves (the book's figure helpers live in the workshop)",
            "check_distribution": "mspec.distributions.check_distribution (an internal validator)"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _RENAMED:
        raise AttributeError(f"mspec.{name} is now {_RENAMED[name]}")
    raise AttributeError(f"module 'mspec' has no attribute {name!r}")


__all__ = ["CanonicalScheme", "ImportanceSampling", "LPFallbackWarning", "LPSolveError", "NewtonSpecTr",
           "OptimalLP", "OptimalSelection", "RatioImportanceSampling", "ReferenceOptimalSelection", "SCHEMES",
           "SchemeError", "Selection", "SelectionScheme", "SingleDraft", "SlowSchemeWarning", "SpecInfer", "SpecTr",
           "TwoStepScheme", "acceptance_is_one", "distribution_from_logits",
           "get_scheme", "lex_optimal_induced", "make_scheme", "optimal_acceptance",
           "output_distribution", "single_draft_acceptance", "single_draft_sample", "solve_canonical_lp",
           "solve_optimal_lp", "specinfer_acceptance", "specinfer_sample", "spectr_acceptance",
           "spectr_sample"]

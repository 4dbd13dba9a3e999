"""The paper's published numbers, to print next to ours.

Source: Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic and Louizos,
"Multi-Draft Speculative Sampling: Canonical Decomposition and Theoretical Limits",
ICLR 2025, arXiv:2410.18234, Section 6 (Tables 1-6). Quoted as published results; we
read them from a third-party extraction of the paper's tables, which lacks the WMT
columns of Table 3 and the values of Figures 3 and 4 (plots only).

Setting of every number here: draft OPT-125M, target OPT-13B, draft length L = 5,
identical drafts unless stated. ``(mean, standard error)`` pairs as printed in the paper.
Scheme names are this package's registry names (``"is"``, ``"spectr"``,
``"specinfer"``, ``"optimal"``, ``"single"``): the paper's IS numbers are those of its IS
scheme as published, ``"is"``.
"""

from __future__ import annotations

#: the paper's model pair, for table headers
PAIR = "OPT-125M -> OPT-13B"
#: short citation for printed output
CITATION = "Khisti et al., ICLR 2025 (arXiv:2410.18234)"
#: the paper's draft length
DRAFT_LENGTH = 5
#: the multi-draft schemes every experiment compares, in print order: the exactly optimal one
#: (beyond the paper: :mod:`mspec.fast.optimal_selection`), the paper's IS scheme as
#: published (``"is"``), our IS variant (``"is-ratio"``) and the paper's two baselines
COMPARED_SCHEMES = ("optimal", "is", "is-ratio", "spectr", "specinfer")
#: the IS schemes, which take the truncation parameters ``s`` and ``alphabet``
IS_SCHEMES = ("is", "is-ratio")

#: Table 1: block efficiency on Dolly vs number of drafts K (identical drafts).
TABLE1_BLOCK_EFFICIENCY = {
    "is": {2: (2.13, 0.05), 3: (2.22, 0.05), 4: (2.26, 0.05), 5: (2.27, 0.05), 6: (2.28, 0.06)},
    "specinfer": {2: (1.76, 0.04), 3: (1.86, 0.05), 4: (1.95, 0.05), 5: (2.00, 0.04), 6: (2.04, 0.05)},
    "spectr": {2: (1.77, 0.04), 3: (1.89, 0.05), 4: (1.96, 0.05), 5: (2.03, 0.06), 6: (2.08, 0.04)},
}

#: Table 2: IS truncation ablation (K = 2, Dolly): alphabet size (at s = 5) ->
#: (block efficiency, token-rate improvement over single-draft SD in %).
TABLE2_ALPHABET = {
    10: ((1.98, 0.03), (-0.57, 3.38)),
    20: ((2.00, 0.04), (1.00, 3.08)),
    40: ((2.05, 0.04), (6.63, 3.18)),
    50: ((2.03, 0.05), (3.22, 3.39)),
}
#: Table 2: LP threshold s (at alphabet 40) -> (block efficiency, token-rate improvement %).
TABLE2_S = {
    5: ((2.05, 0.04), (6.63, 3.18)),
    10: ((2.04, 0.05), (1.52, 3.47)),
    15: ((2.04, 0.04), (1.74, 2.36)),
}

#: Table 3: mean token-level acceptance probability, dataset -> scheme -> K -> value.
#: (The WMT columns were not available to us.)
TABLE3_ACCEPTANCE = {
    "xsum": {
        "optimal": {2: 0.5009, 4: 0.5226, 8: 0.5419},
        "is": {2: 0.4933, 4: 0.5145, 8: 0.5333},
        "spectr": {2: 0.4889, 4: 0.5083, 8: 0.5263},
        "specinfer": {2: 0.4875, 4: 0.5058, 8: 0.5227},
    },
    "dolly": {
        "optimal": {2: 0.6384, 4: 0.6731, 8: 0.6962},
        "is": {2: 0.6348, 4: 0.6691, 8: 0.6919},
        "spectr": {2: 0.6246, 4: 0.6560, 8: 0.6800},
        "specinfer": {2: 0.6202, 4: 0.6489, 8: 0.6722},
    },
}

#: Table 4: block efficiency on Dolly with top-k sampling (temperature 1.0 for both
#: models): top_k -> K -> scheme -> (mean, standard error).
TABLE4_TOP_K = {
    10: {
        2: {"is": (2.48, 0.01), "spectr": (2.43, 0.01), "specinfer": (2.38, 0.02)},
        3: {"is": (2.59, 0.02), "spectr": (2.55, 0.01), "specinfer": (2.49, 0.02)},
    },
    5: {
        2: {"is": (2.52, 0.02), "spectr": (2.48, 0.02), "specinfer": (2.47, 0.01)},
        3: {"is": (2.63, 0.03), "spectr": (2.56, 0.03), "specinfer": (2.55, 0.04)},
    },
}

#: draft temperatures of Figures 3 and 4 and Tables 5 and 6
TEMPERATURES = (1.2, 1.4, 1.6, 2.0, 2.4)

#: Table 5: ROUGE-L on XSum vs draft temperature (:data:`TEMPERATURES`), K = 2.
TABLE5_ROUGE_L = {
    "is": ((0.186, 0.004), (0.188, 0.002), (0.191, 0.003), (0.186, 0.004), (0.187, 0.003)),
    "single": ((0.190, 0.006), (0.185, 0.005), (0.190, 0.004), (0.186, 0.003), (0.186, 0.004)),
    "specinfer": ((0.184, 0.004), (0.190, 0.002), (0.187, 0.001), (0.186, 0.003), (0.186, 0.004)),
    "spectr": ((0.188, 0.002), (0.182, 0.006), (0.188, 0.001), (0.185, 0.006), (0.188, 0.001)),
}

#: Table 6: BLEU (0-1 scale) on WMT vs draft temperature (:data:`TEMPERATURES`), K = 2.
TABLE6_BLEU = {
    "is": ((0.037, 0.002), (0.038, 0.004), (0.034, 0.002), (0.039, 0.003), (0.039, 0.002)),
    "single": ((0.036, 0.000), (0.037, 0.003), (0.038, 0.004), (0.037, 0.003), (0.038, 0.002)),
    "specinfer": ((0.035, 0.003), (0.039, 0.004), (0.035, 0.003), (0.034, 0.009), (0.036, 0.003)),
    "spectr": ((0.039, 0.001), (0.037, 0.001), (0.039, 0.001), (0.036, 0.002), (0.035, 0.001)),
}

#: quality table per dataset (the paper has none for Dolly)
QUALITY_TABLES = {"xsum": TABLE5_ROUGE_L, "wmt": TABLE6_BLEU}


def paper_value(table: dict, *keys):
    """Look up ``table[k1][k2]...``; ``None`` when the paper has no such entry."""
    node = table
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


__all__ = [
    "CITATION",
    "COMPARED_SCHEMES",
    "DRAFT_LENGTH",
    "PAIR",
    "QUALITY_TABLES",
    "IS_SCHEMES",
    "TABLE1_BLOCK_EFFICIENCY",
    "TABLE2_ALPHABET",
    "TABLE2_S",
    "TABLE3_ACCEPTANCE",
    "TABLE4_TOP_K",
    "TABLE5_ROUGE_L",
    "TABLE6_BLEU",
    "TEMPERATURES",
    "paper_value",
]

"""Multi-draft speculative sampling (Khisti et al., ICLR 2025) as a custom generation method.

transformers loads this file with ``model.generate(..., custom_generate=<this folder or its
Hub repository>, trust_remote_code=True)`` and hands it every argument of ``generate``; the
method itself lives in the ``mspec`` package (``mspec.lm.custom_generate``).
"""

from mspec.lm.custom_generate import generate_from_folder


def generate(model, **kwargs):
    """Run ``generate`` with multi-draft speculative sampling (see the folder's README)."""
    return generate_from_folder(model, **kwargs)

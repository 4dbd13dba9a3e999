"""Multi-draft speculative sampling (Khisti et al., ICLR 2025) as a custom generation method.

transformers loads this file with ``model.generate(..., custom_generate=<this folder or its
Hub repository>, trust_remote_code=True)`` and hands it every argument of ``generate``. A
callable given to ``generate`` never receives ``streamer=``, ``tokenizer=`` or
``stop_strings=``; this file does, and passes them on to the method of the ``mspec`` package
(``mspec.multi_draft_sampling``) as its own ``stream=``, ``text_tokenizer=`` and
``stop_texts=``.
"""

from mspec.lm.custom_generate import multi_draft_sampling


def generate(model, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
             prefix_allowed_tokens_fn=None, synced_gpus=None, assistant_model=None, streamer=None,
             negative_prompt_ids=None, negative_prompt_attention_mask=None, **kwargs):
    """Run ``generate`` with multi-draft speculative sampling (see the folder's README).

    It takes ``generate``'s own ``streamer=``, ``tokenizer=`` and ``stop_strings=`` (which a
    callable never receives), then runs ``generate`` with ``mspec.multi_draft_sampling`` and
    the rest of the arguments (``draft_model=``, ``num_drafts=``, ... as there), which refuses
    what it cannot honour (an assistant model, negative prompts, beams, ...) before any model call.

    Raises:
        ValueError: stop strings without a tokenizer; an argument the method refuses.
    """
    tokenizer = kwargs.pop("tokenizer", None)
    stop_strings = kwargs.pop("stop_strings", None)
    if generation_config is not None and getattr(generation_config, "stop_strings", None):
        generation_config = generation_config.__class__.from_dict(generation_config.to_dict())
        stop_strings, generation_config.stop_strings = generation_config.stop_strings, None
    if stop_strings is not None and tokenizer is None:
        raise ValueError("stop_strings= needs the tokenizer that reads them: pass tokenizer= to generate")
    return model.generate(inputs, generation_config=generation_config, logits_processor=logits_processor,
                          stopping_criteria=stopping_criteria, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
                          synced_gpus=synced_gpus, assistant_model=assistant_model,
                          negative_prompt_ids=negative_prompt_ids,
                          negative_prompt_attention_mask=negative_prompt_attention_mask,
                          custom_generate=multi_draft_sampling, stream=streamer, stop_texts=stop_strings,
                          text_tokenizer=tokenizer if stop_strings is not None else None, **kwargs)

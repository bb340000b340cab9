"""The Triton backend must be a drop-in replacement for the torch reference."""

import inspect

from llmbench.kernels import reference, triton_ops


def _public_functions(module) -> dict:
    return {
        name: fn
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and not name.startswith("_") and fn.__module__ == module.__name__
    }


def test_triton_backend_offers_every_reference_op_with_the_same_parameters():
    reference_ops = _public_functions(reference)
    assert set(reference_ops) == set(triton_ops.__all__)
    for name, ref_fn in reference_ops.items():
        ref_params = list(inspect.signature(ref_fn).parameters.values())
        params = list(inspect.signature(getattr(triton_ops, name)).parameters.values())
        # tuning knobs may follow as keyword-only extras; everything the reference takes must match
        assert [(p.name, p.kind, p.default) for p in params[: len(ref_params)]] == [
            (p.name, p.kind, p.default) for p in ref_params
        ], name
        assert all(p.kind == p.KEYWORD_ONLY and p.default is not p.empty for p in params[len(ref_params) :])

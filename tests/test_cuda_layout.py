"""The cuda adapter's layout handling, on CPU: what the adapter hands causal-conv1d is in the package's
channel-last layout whatever strides the caller's tensor had (the package raises on some misaligned
strides and silently misreads others; see repro/causal_conv1d_dfinal_states.py). Pure torch, so it runs
without CUDA or the package."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from gdn_equiv.model.backends.cuda_backend import _package_layout, _to_package_layout


@given(
    B=st.integers(1, 3),
    T=st.integers(1, 5),
    D8=st.integers(1, 3),
    lo=st.integers(0, 9),
    extra=st.integers(0, 9),
    size_one_dims=st.booleans(),
)
def test_gradient_copy_is_in_the_package_layout(
    B: int, T: int, D8: int, lo: int, extra: int, size_one_dims: bool
) -> None:
    """A channel slice of a wider ``[B, T, D]`` tensor (how ``dy`` reaches the adapter when the caller
    concatenates q|k|v), seen as ``[B, D, T]``: the copy has strides ``(T*D, 1, D)``, equal values, and a
    fresh buffer; size-1 dimensions included (``.contiguous()`` keeps their strides)."""
    if size_one_dims:
        B = T = 1
    D = 8 * D8
    wide = torch.randn(B, T, lo + D + extra)
    grad = wide[..., lo : lo + D].transpose(1, 2)  # [B, D, T]
    before = wide.clone()
    out = _to_package_layout(grad)
    assert out.stride() == (T * D, 1, D), (grad.stride(), out.stride())
    assert _package_layout(out) or out.data_ptr() % 16 != 0
    torch.testing.assert_close(out, grad, rtol=0, atol=0)
    assert out.data_ptr() != grad.data_ptr()
    torch.testing.assert_close(wide, before, rtol=0, atol=0)

"""fla's ABC layer cannot train with an attention mask: it multiplies the conv output in place.

Seen on the H200 (2026-12-04) as the cost of PR #977's abc ``OtherRefusal`` gap (``gdn-equiv fuzz --target fla
--family all --device cuda``, fla's own cores): forcing the fused path raised ``RuntimeError: Output 2 of
SplitWithSizesBackward0 is a view and is being modified inplace``. It is not the fusion's doing:
``fla/layers/abc.py`` runs ``v = v.mul_(attention_mask[:, -v.shape[-2]:, None])`` on the short conv's
output, which is a view in both paths (a ``split`` of the fused conv; fla's ``CausalConv1dFunction``
output for the separate conv), so any call with grad on and a mask raises, in 0.6.0 and in the PR build.
(The gap's cost line now says when both paths raise.) Prints, on either version::

    fla 0.6.0
    convs agree (fused where the version fuses): RuntimeError: Output 0 of CausalConv1dFunction is a view ...
    convs differ (separate path): RuntimeError: Output 0 of CausalConv1dFunction is a view ...
    exit 1 (0 once fla multiplies out of place)

    TRITON_INTERPRET=1 python repro/fla_abc_mask_inplace.py    # CPU (or on a GPU without the variable)
"""

import os
import sys

import fla
import torch
from fla.layers.abc import ABCAttention

from gdn_equiv.model.backends import fla_backend

if fla_backend._interpreting():  # one config per autotuned kernel (the interpreter cannot tune), int masks as bool
    os.environ[fla_backend.AUTOTUNE_ENV] = "first"
    fla_backend.pin_loaded_fla()
    fla_backend.accept_int_masks()
device = "cuda" if torch.cuda.is_available() else "cpu"


def train_step(convs_agree: bool) -> str | None:
    """One forward+backward with a left-padded mask; the error it raises, or None."""
    torch.manual_seed(0)
    layer = ABCAttention(hidden_size=16, num_heads=1, num_slots=4, use_short_conv=True, conv_size=2, expand_k=0.5)
    layer = layer.to(device)
    if not convs_agree:  # a legal separate path: v's conv without activation
        layer.v_conv1d.activation = None
    x = torch.randn(1, 4, 16, device=device, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 1]], device=device)
    try:
        layer(x, attention_mask=mask)[0].sum().backward()
    except RuntimeError as exc:
        return f"RuntimeError: {str(exc)[:90]}..."
    return None


print("fla", fla.__version__)
errors = {
    "convs agree (fused where the version fuses)": train_step(True),
    "convs differ (separate path)": train_step(False),
}
for what, error in errors.items():
    print(f"{what}: {error or 'trains'}")
sys.exit(1 if any(errors.values()) else 0)

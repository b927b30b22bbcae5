"""The ``cuda`` backend with its final-state layout guard off, as a plug-in backend.

The gdn_equiv ``cuda`` adapter hands causal-conv1d the final state's gradient channel-last
(``_PackageLayoutGrad``) because the package misreads any other layout without an error
(``repro/causal_conv1d_dfinal_states.py``, found by hand). This backend passes the gradient as autograd
delivers it, so the suite's layout strategies can be shown to find that bug by themselves (on a machine
with CUDA and causal-conv1d; elsewhere every test skips with the reason)::

    pytest --pyargs gdn_equiv.suite.test_conformance -k gradients \\
        --gdn-backend repro.causal_conv1d_as_is:BACKEND

Expected: ``test_backend_gradients_match_torch`` fails, shrunk to a call whose ``dfinal`` is not
channel-last with more than 32 channels, ``grad.x`` not close in channels 32 and up.
"""

from __future__ import annotations

import dataclasses
import functools

from gdn_equiv.model.backends import cuda_backend

BACKEND = dataclasses.replace(
    cuda_backend.BACKEND,
    name="cuda-as-is",
    forward=functools.partial(cuda_backend.forward, final_grad_as_is=True),
    description="causal-conv1d with the final state's gradient handed over as autograd passes it",
)

"""Moving FlashSAC agents between PyTorch (``agent_torch``) and JAX (``agent_jax``), and comparing them.

The only package that imports both agents; the agents never import each other. Modules:

* ``agent_interop.convert``: the ``python -m agent_interop.convert`` command (every direction; the agents built from
  the source's shapes and stored keys);
* ``agent_interop.torch_jax``: the state converter (``torch_to_jax``, ``jax_to_torch``, checkpoint conversion) and
  ``make_agent_from_torch_init``;
* ``agent_interop.upstream``: upstream FlashSAC's checkpoint layout in and out;
* ``agent_interop.trees``: torch state-dict names <-> flax variable paths, nested-tree flattening;
* ``agent_interop.synthetic``: Box spaces and replay batches for agents built without an environment (numpy only);
* ``agent_interop.parity``: the parity harness (shared batches and policy noise, gradients, state comparisons);
* ``agent_interop.parity_run``: a paired training run with its diagnostics, summary and markdown report.
* ``agent_interop.train``: ``python -m agent_interop.train --agent A --init-from B``, agent A's CLI with agent B's
  initial state for the same seed.

Submodules are imported explicitly (``from agent_interop.torch_jax import torch_to_jax``), so importing one side's
helpers does not import the other framework.
"""

"""Dump the PTX that XLA compiles the pinned large-B Pallas kernel into (B = 65,536, fp32, N = 101, E = 2).

Run with XLA_FLAGS=--xla_dump_to=DIR; the .ptx files land in DIR. Then `ptxas -v` on them gives the register count
under pip Triton's ptxas, to tell whether XLA's extra registers come from its Triton/LLVM or from its ptxas.
"""
import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.ops import categorical_td_target_pallas
from shared_spec.cases import make_inputs

x = make_inputs(65536, 101, 2, seed=0, kind="random")
args = [jnp.asarray(np.asarray(x[k])) for k in ("next_qs", "next_log_probs", "reward", "terminated",
                                                 "next_alpha_log_pi")]
out = jax.jit(lambda *a: categorical_td_target_pallas(*a, 0.99, interpret=False))(*args)
print("checksum", float(jnp.nansum(out)))

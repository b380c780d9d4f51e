"""Save the PTX that jaxlib's Triton (`jax._src.lib.triton.compile`, used by Pallas on jaxlib > 0.10.2) makes of
main's Pallas kernel at its pinned large-B configuration (B = 65,536, fp32, N = 101, E = 2), to OUT/pallas_jaxlib.ptx.

    python3 bench/results/h200-2026-12-02-window-paths/jaxlib_ptx.py OUT
"""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.lib import triton as jaxlib_triton

from jax_impl.ops import categorical_td_target_pallas
from shared_spec.cases import make_inputs

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
_compile = jaxlib_triton.compile


def _saving_compile(*args, **kwargs):
    res = _compile(*args, **kwargs)
    with open(os.path.join(out_dir, "pallas_jaxlib.ptx"), "w") as f:
        f.write(res.asm if isinstance(res.asm, str) else res.asm.decode())
    with open(os.path.join(out_dir, "compile_args.txt"), "w") as f:
        f.write(repr(args[2:]) + " " + repr(kwargs) + "\n")
    return res


jaxlib_triton.compile = _saving_compile
x = make_inputs(65536, 101, 2, seed=0, kind="random")
args = [jnp.asarray(np.asarray(x[k])) for k in ("next_qs", "next_log_probs", "reward", "terminated",
                                                 "next_alpha_log_pi")]
out = jax.jit(lambda *a: categorical_td_target_pallas(*a, 0.99, interpret=False))(*args)
print("checksum", float(jnp.nansum(out)))

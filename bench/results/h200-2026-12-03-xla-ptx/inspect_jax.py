"""Print where jaxlib 0.11.x compiles a Pallas-Triton kernel (the registration's lowering, the custom call it emits)
and the ptxas / libnvptxcompiler / libdevice files in the environment's site-packages."""
import inspect
import os

import jax
import jax._src.lib.triton as jaxlib_triton
import jaxlib
from jax._src.pallas.triton import pallas_call_registration as reg

print("jax", jax.__version__, "jaxlib", jaxlib.__version__, os.path.dirname(jaxlib.__file__))
src = inspect.getsource(reg)
i = src.find("lower_jaxpr_to_triton_module(")
print(src[i - 200:i + 4500])
print("lib.triton:", [n for n in dir(jaxlib_triton) if not n.startswith("__")])
root = os.path.dirname(os.path.dirname(jaxlib.__file__))
for dp, _, fn in os.walk(root):
    for f in fn:
        if f in ("ptxas", "nvlink") or "nvptxcompiler" in f or f.startswith("libdevice"):
            print(os.path.join(dp, f))

#!/usr/bin/env bash
# eager-key's tests of the eager plans on the GPU machine (torch 2.11), CPU tensors under TRITON_INTERPRET=1.
cd _ek && TRITON_INTERPRET=1 PYTHONPATH=/tmp/site:$PWD python3 -m pytest -q -p no:cacheprovider tests/test_torch_eager_plans.py 2>&1 | tail -15

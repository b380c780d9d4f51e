"""``python -m kernel_validation``: the same as ``flashsac-validate-kernels``."""

import sys

from kernel_validation.cli import main

sys.exit(main())

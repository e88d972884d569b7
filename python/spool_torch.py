"""Deprecated: the old name of spool.torch, kept for one release.

    import spool_torch; spool_torch.install()   # still works
    import spool.torch; spool.torch.install()   # the package's name (pip install . from spool)

This module is spool.torch itself (the same functions, state and library), so code that mixes
the two names still installs PyTorch's allocator once. The spool package lies next to this file
(python/spool/ in the source tree, share/spool/python/spool/ when installed by CMake).
"""
import sys
import warnings

import spool.torch as _torch

warnings.warn("spool_torch is now spool.torch (pip install . from spool's source tree); the old "
              "name goes in the next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _torch

"""The seed's FlyDSL kernel for AMD gfx942/gfx950 and everything around it.

``decode`` the kernel (needs FlyDSL), ``lanes`` its lane arithmetic (numpy
too), ``seed_index`` the seed's launch and index integer logic, ``backend``
the host side (backend ``flydsl`` and the torch entry point ``decode``),
``resources`` the compile-only resource check.
"""

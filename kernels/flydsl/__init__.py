"""The seed's FlyDSL kernel for AMD gfx942/gfx950 and everything around it.

``decode`` the kernel (needs FlyDSL), ``host`` the host-side facts that need
neither torch nor a GPU (launch plan, compiled configurations, linker),
``lanes`` its lane arithmetic and XCD placement (numpy too), ``targets`` the hardware facts of each target,
``seed_index`` the seed's slot selection restated in numpy, ``backend`` the
host side (backend ``flydsl`` and the torch entry point ``decode``),
``resources`` the compile-only resource check, ``sim`` the simulator.
"""

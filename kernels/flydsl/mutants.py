"""The FlyDSL kernel's mutants: their names and bugs, apart from the kernel's
code so that the simulator's backends can name them where FlyDSL is not
installed (``nvfp4_suite.kernels.flydsl.decode`` builds them;
``nvfp4_suite.kernels.flydsl.sim.backend`` registers each as a backend)."""

# Kernel mutants: each injects one known bug class, so the conformance check
# through the simulator can show it catches that class in the compiled kernel.
MUTANTS = {
    "causal_off_by_one": "the causal limit lets one key past the row's position through",
    "v_scale_linear": "V scales read as if stored linearly, not swizzled in groups of 4 tokens",
    "merge_no_rescale": "the split merge adds the splits' partials without rescaling to the top max",
    "ticket_not_reset": "the merging split leaves its ticket counter non-zero",
    "fnuz_uncorrected": "gfx942's E4M3FNUZ fp8 conversion used without the OCP correction",
    "ticket_no_wait": "the s_waitcnt vmcnt(0) before the ticket's atomic removed: the last split may read "
                      "partials not yet written",
    "partials_no_sc1": "split partials stored and loaded without sc1 under xcds 0: another XCD's L2 may serve "
                       "stale partials",
}

# The ordering bugs: caught by the simulator's memory-model check, which the
# simulator's backends then run with stale values substituted (``memorder="stale"``),
# so the conformance check sees them as wrong outputs.
MEMORY_ORDER_MUTANTS = ("ticket_no_wait", "partials_no_sc1")

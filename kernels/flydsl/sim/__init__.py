"""A wave64 simulator of the CDNA3 (gfx942) and CDNA4 (gfx950) instructions
that the FlyDSL decode kernel compiles to, so the kernel runs on any CPU.

``program`` parses LLVM's assembly text of a compile; ``wave`` holds a wave's
registers, operand access and the instruction registry; ``memory`` the
device allocations (faults on any access outside them), buffer resources and
LDS; ``ops`` the instruction families (each module states its semantic
decisions and where hardware may differ); ``launch`` the dispatch of
workgroups (in a chosen order) and waves (to barriers); ``compile`` the
on-disk cache of compiled configurations; ``backend`` the
``flydsl-sim-gfx942``/``-gfx950`` backends; ``bench`` the speed benchmark
(per instruction and per launch); ``coverage`` the launches' records of the
basic blocks and branch directions they reach, and ``coverage_exceptions``
the directions argued unreachable or not yet reached by the catalog. The
drivers that run the check engine over it live with it, above the kernels: ``nvfp4_suite.vectors.simulator.sweep``
(the full check over worker processes), ``nvfp4_suite.vectors.simulator.coverage``
(the catalog's coverage of the kernel's control flow) and
``nvfp4_suite.vectors.simulator.bench`` (the benchmark with the catalog's time per target).

An instruction without semantics here stops the run (``UnknownInstruction``)
naming its mnemonic and its place: the instruction's index in the program
and its line in the assembly text (the text carries no byte addresses).
"""

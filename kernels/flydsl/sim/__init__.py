"""A wave64 simulator of the CDNA3 (gfx942) and CDNA4 (gfx950) instructions
that the FlyDSL decode kernel compiles to, so the kernel runs on any CPU.

``program`` parses LLVM's assembly text of a compile, ``wave`` holds a wave's
registers and the instruction registry, ``memory`` the device allocations,
buffer resources and LDS, ``ops`` the instruction families, ``launch`` the
dispatch of workgroups and waves.
"""

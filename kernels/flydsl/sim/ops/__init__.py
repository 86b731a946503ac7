"""The instruction families; importing this package registers every handler."""

from . import memory, mfma, scalar, vfloat, vint, xlane  # noqa: F401

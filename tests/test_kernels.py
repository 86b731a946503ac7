"""kernels: the backend protocol and the registry."""

import numpy as np
import pytest

from nvfp4_suite import kernels
from nvfp4_suite.reference.examples import random_problem


def test_registry_has_the_reference_backends():
    assert {"reference", "emulate"} <= set(kernels.registered())
    for name in ("reference", "emulate"):
        b = kernels.get_backend(name)
        assert isinstance(b, kernels.Backend) and b.available() is None and 1 in b.capabilities.splits


def test_module_attr_resolves_classes_and_instances():
    b = kernels.get_backend("nvfp4_suite.kernels.reference_backends:EmulateBackend")
    assert b.name == "emulate"
    p = random_problem(0, reqs=2, num_kv_heads=1, topk=4)
    out = b(p, splits=2)
    assert out.dtype == np.float32 and out.shape == (p.rows, p.H, 128)


def test_unknown_and_malformed_backends_raise_clear_errors():
    with pytest.raises(kernels.BackendError, match="unknown backend 'nope'"):
        kernels.get_backend("nope")
    with pytest.raises(kernels.BackendError, match="cannot load backend"):
        kernels.get_backend("no.such.module:thing")
    with pytest.raises(kernels.BackendError, match="does not follow nvfp4_suite.kernels.Backend"):
        kernels.get_backend("numpy:float32")


@pytest.mark.parametrize("source, spec, msg", [
    ("raise RuntimeError('no GPU driver')\n", "badmod:Backend",
     "importing 'badmod' raised RuntimeError: no GPU driver"),
    ("def Backend():\n    raise OSError('device busy')\n", "badmod:Backend", "creating it raised OSError: device busy"),
    ("", "badmod:Missing", "module 'badmod' has no attribute 'Missing'"),
    # issue 20: a kernel module written as a script, exiting when it finds no device
    ("import sys\nsys.exit(0)\n", "badmod:Backend", "importing 'badmod' raised SystemExit: 0"),
    ("def Backend():\n    raise SystemExit('no device')\n", "badmod:Backend",
     "creating it raised SystemExit: no device"),
    ("def __getattr__(n):\n    raise RuntimeError('lazy load failed')\n", "badmod:Backend",
     "reading 'Backend' raised RuntimeError: lazy load failed"),
    ("class B:\n    @property\n    def name(self):\n        raise RuntimeError('no name')\n"
     "    geometry = capabilities = None\n    def available(self): return None\n    def __call__(self, p): pass\n"
     "Backend = B()\n", "badmod:Backend", "reading its attributes raised RuntimeError: no name"),
    ("", ":Backend", "both parts non-empty"),
    ("", "badmod:", "both parts non-empty"),
])
def test_every_way_a_spec_can_fail_is_a_backend_error(tmp_path, monkeypatch, source, spec, msg):
    (tmp_path / "badmod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "badmod", raising=False)
    with pytest.raises(kernels.BackendError) as e:
        kernels.get_backend(spec)
    assert msg in str(e.value)


def test_ctrl_c_during_a_slow_backend_import_passes_through(tmp_path, monkeypatch):
    (tmp_path / "slowmod.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "slowmod", raising=False)
    with pytest.raises(KeyboardInterrupt):
        kernels.get_backend("slowmod:Backend")

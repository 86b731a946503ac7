"""nvfp4_suite.kernels.flydsl.sim.wave: the register views batched cores read and write."""

import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl.sim.wave import Rows


def test_rows_gather_and_scatter_only_the_chosen_waves_registers():
    vfile = np.arange(5 * 8 * 4).reshape(5, 8, 4)
    sfile = np.arange(5 * 6).reshape(5, 6)
    rows = np.array([0, 2, 3])
    v, s = Rows(vfile, rows), Rows(sfile, rows)
    assert v.shape == (3, 8, 4) and s.shape == (3, 6)
    assert np.array_equal(v[:, 1], vfile[[0, 2, 3], 1]) and v[:, 1, None].shape == (3, 1, 4)
    assert np.array_equal(v[:, 2:4], vfile[[0, 2, 3], 2:4])
    assert np.array_equal(s[:, 2, None], sfile[[0, 2, 3], 2:3])
    assert np.array_equal(s[:, [1, 4], None][..., 0], sfile[[0, 2, 3]][:, [1, 4]])
    before = vfile.copy()
    v[:, 1] = -1
    v[:, 5:7] = np.zeros((3, 2, 4), int)
    changed = np.zeros(vfile.shape, bool)
    changed[[0, 2, 3], 1] = changed[[0, 2, 3], 5:7] = True
    assert (vfile[changed] <= 0).all() and np.array_equal(vfile[~changed], before[~changed])
    s[:, 3] = 7
    assert list(sfile[:, 3]) == [7, 9, 7, 7, 27]
    with pytest.raises(TypeError, match="select every wave first"):
        v[1]

"""The worked example of docs/backends.md runs as written: its adapter, on a numpy model of the kernel
(``tests/thirdparty.py`` standing in for ``mykernel``), and its commands.

"""

import re
import sys
import types
from pathlib import Path

import pytest
import thirdparty as T

from nvfp4_suite.reference import layout as L
from nvfp4_suite.vectors.cli import main

DOC = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()


def _block(marker: str) -> str:
    m = re.search(re.escape(f"<!-- worked-example: {marker} -->") + r"\n```python\n(.*?)```", DOC, re.S)
    assert m, f"docs/backends.md: no python block after the worked-example marker {marker!r}"
    return m.group(1)


def _commands() -> list[list[str]]:
    start = DOC.index("<!-- worked-example: adapter.py -->")
    block = re.search(r"\n```\n(python -m nvfp4_suite\.vectors .*?)```", DOC[start:], re.S).group(1)
    return [line.split()[3:] for line in block.strip().splitlines()]


class _Inputs:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _mykernel() -> types.ModuleType:
    """``mykernel.decode`` as the worked example calls it, running the numpy model."""
    mod = types.ModuleType("mykernel")

    def decode(k_codes, k_scales, v_codes, v_scales, q, topk, block_table, seq_lens, *, q_len, sm_scale,
               k_scale, v_scale, splits):
        pages, _, hkv, _ = k_codes.shape
        cache = {"k_codes": k_codes.reshape(pages, -1), "k_scales": k_scales.reshape(pages, -1),
                 "v_codes": v_codes.reshape(pages, -1), "v_scales": v_scales.reshape(pages, -1)}
        inputs = _Inputs(q=q, topk=topk, block_table=block_table, seq_lens=seq_lens, q_len=q_len, num_kv_heads=hkv,
                         sm_scale=sm_scale, k_global_scale=k_scale, v_global_scale=v_scale)
        return T.run(cache, inputs, splits)

    mod.decode = decode
    return mod


@pytest.fixture
def adapter(tmp_path, monkeypatch):
    (tmp_path / "adapter.py").write_text(_block("adapter.py"))
    monkeypatch.setitem(sys.modules, "mykernel", _mykernel())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "adapter", raising=False)
    import adapter as mod

    return mod


def test_the_adapter_declares_what_the_readme_says(adapter):
    caps = adapter.Backend().capabilities
    assert caps.slot_lists == "compacted" and caps.cache_layout == L.SEPARATE == T.LAYOUT


def test_the_readme_check_command_finds_the_example_conformant(adapter, capsys):
    argv = _commands()[0]
    assert argv == ["check", "--backend", "adapter:Backend"]
    # Fewer generated problems and two split counts keep it CI-sized; the cases are all run.
    assert main(argv + ["--examples", "8", "--splits", "1", "--splits", "3"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "CONFORMANT: backend mykernel" in out and "NOT CONFORMANT" not in out
    assert "SKIPPED: outside slot_lists=compacted: topk[0, 0, 0] = -1: " in out
    assert "8 generated problems" in out


def test_judged_as_the_exact_class_the_example_is_not_conformant(adapter, capsys):
    # Its P in bf16 is outside the exact class: the declaration is what makes it conformant.
    assert main(["check", "--backend", "adapter:Backend", "--arithmetic", "exact", "--examples", "0",
                 "--splits", "1"]) == 1
    assert "NOT CONFORMANT: backend mykernel" in capsys.readouterr().out


def test_the_readme_outside_domain_command_reports_information_only(adapter, capsys):
    argv = _commands()[1]
    assert argv == ["check", "--backend", "adapter:Backend", "--outside-domain", "--examples", "0"]
    assert main(argv + ["--splits", "1"]) == 0
    out = capsys.readouterr().out
    assert "outside the domain, information only: splits=1: " in out and "CONFORMANT: backend mykernel" in out


def test_the_readme_export_and_import_commands_run(adapter, tmp_path, capsys):
    L.save(adapter.CACHE, tmp_path / "separate.toml")
    export, imp = _commands()[2:4]
    assert main(export) == 0
    first = sorted((tmp_path / "exported").glob("05*-compacted.npz"))[0]
    (tmp_path / "dump.npz").write_bytes(first.read_bytes())
    assert main(imp) == 0 and (tmp_path / "case.npz").is_file()
    assert main(["replay", "case.npz", "--backend", "reference", "--splits", "1"]) == 0

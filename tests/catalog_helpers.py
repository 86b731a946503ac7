"""A small copy of the built-in catalog for tests that run over it in seconds."""

import shutil


def copy_catalog(tmp_path, monkeypatch, chosen) -> "object":
    """Copy the manifest entries ``chosen`` (and their files) into ``tmp_path/vectors``
    and point ``nvfp4_suite.vectors.catalog`` at that copy; returns its folder."""
    from nvfp4_suite.vectors import catalog

    m = catalog.load_manifest()
    here = tmp_path / "vectors"
    (here / "data").mkdir(parents=True)
    for c in chosen:
        shutil.copy(catalog.HERE / c["file"], here / c["file"])
    (here / "manifest.json").write_text(catalog.dump({**m, "cases": chosen}))
    monkeypatch.setattr(catalog, "HERE", here)
    monkeypatch.setattr(catalog, "DATA", here / "data")
    monkeypatch.setattr(catalog, "MANIFEST", here / "manifest.json")
    return here

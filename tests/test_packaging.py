"""pyproject.toml: the suite installs under one import name, ``nvfp4_suite``, so
that a kernel project with its own ``kernels``, ``reference`` or ``vectors``
package can install the suite and check its kernel."""

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "nvfp4-vectors"

# A user's kernel repository, laid out as most are: its own top-level
# `kernels` package (with no `registered`, the attribute whose absence used to
# break every command), and `reference` and `vectors` packages of its own.
USER_FILES = {
    "kernels/__init__.py": "WHOSE = 'user'\n",
    "kernels/scale.py": "def halve(x):\n    return x * 0.5\n",
    "kernels/mine.py": textwrap.dedent("""\
        import kernels
        from kernels.scale import halve
        from nvfp4_suite import reference
        from nvfp4_suite.kernels import Capabilities

        assert kernels.WHOSE == "user"


        class Backend:
            name = "user-kernel"
            geometry = reference.SEED_GEOMETRY
            capabilities = Capabilities(splits=(1, 2))

            def available(self):
                return None

            def __call__(self, problem, *, splits=1):
                return reference.emulate(problem, splits=splits)


        class Halved(Backend):
            name = "user-kernel-halved"

            def __call__(self, problem, *, splits=1):
                return halve(reference.emulate(problem, splits=splits))
        """),
    "reference/__init__.py": "raise ImportError('the user reference package must not be imported by the suite')\n",
    "vectors/__init__.py": "raise ImportError('the user vectors package must not be imported by the suite')\n",
}


def _user_project(tmp_path: Path) -> Path:
    for name, text in USER_FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _run(cmd, cwd, **env):
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **env}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def test_every_package_folder_is_installed_under_nvfp4_suite():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(("nvfp4_suite",) + p.parent.relative_to(ROOT).parts)
               for top in ("reference", "kernels", "vectors") for p in (ROOT / top).rglob("__init__.py")}
    assert set(tool["packages"]) == folders
    assert tool["package-dir"] == {f"nvfp4_suite.{top}": top for top in ("reference", "kernels", "vectors")}


def test_a_user_project_with_its_own_kernels_package_checks_its_kernel(tmp_path):
    project = _user_project(tmp_path)
    r = _run([sys.executable, "-m", "nvfp4_suite.vectors", "check", "--backend", "kernels.mine:Backend",
              "--examples", "5"], project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "user-kernel" in r.stdout and "CONFORMANT" in r.stdout and "NOT CONFORMANT" not in r.stdout


def test_a_user_projects_wrong_kernel_is_not_conformant(tmp_path):
    project = _user_project(tmp_path)
    r = _run([sys.executable, "-m", "nvfp4_suite.vectors", "check", "--backend", "kernels.mine:Halved",
              "--examples", "5", "--no-golden"], project)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "user-kernel-halved" in r.stdout and "NOT CONFORMANT" in r.stdout


def test_the_console_script_imports_the_users_package_from_the_working_directory(tmp_path):
    project = _user_project(tmp_path)
    r = _run([str(SCRIPT), "check", "--backend", "kernels.mine:Halved", "--examples", "3", "--no-golden"], project)
    assert r.returncode == 1 and "NOT CONFORMANT" in r.stdout, r.stdout + r.stderr
    r = _run([str(SCRIPT), "check", "--backend", "kernels.mine:Backend", "--examples", "3", "--no-golden"], project)
    assert r.returncode == 0, r.stdout + r.stderr


def test_python_m_vectors_runs_in_the_checkout():
    # The README's first command names the checkout's folder, not the import name.
    r = _run([sys.executable, "-m", "vectors", "list", "--flag", "split-merge"], ROOT)
    assert r.returncode == 0 and "split-merge" in r.stdout, r.stdout + r.stderr


# --- the pytest plugin, from the user's project --------------------------------

def _pytest(project, *args):
    return _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], project,
                NVFP4_REPRO_DIR=str(project / ".repro"))


def test_pytest_nvfp4_backend_runs_every_golden_case_by_name_from_a_user_project(tmp_path):
    from nvfp4_suite.vectors import catalog

    project = _user_project(tmp_path)
    r = _pytest(project, "-v", "--nvfp4-backend", "kernels.mine:Backend", "--nvfp4-examples", "3")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    cases = catalog.load_manifest()["cases"]
    for c in cases:
        assert f"nvfp4_suite::test_golden[kernels.mine:Backend-{c['id']:03d}-{c['name']}-" in r.stdout, c["name"]
    assert "nvfp4_suite::test_golden[kernels.mine:Backend-010-stale-tail-127-splits2] PASSED" in r.stdout
    assert "nvfp4_suite::test_golden[kernels.mine:Backend-016-e4m3-nan-v-ff-invalid] PASSED" in r.stdout
    assert "nvfp4_suite::test_generated[kernels.mine:Backend] PASSED" in r.stdout
    # One test per case and distinct launch (the user's backend declares no XCD placement,
    # so placements collapse), one per invalid case, one generated; splits 3 and 8 are
    # outside its capabilities (splits 1, 2): skipped.
    launches = [{(x["splits"], x["order"]) for x in c["launches"]} if c["result"] != "invalid" else {(1, None)}
                for c in cases]
    skipped = sum(s not in (1, 2) for ls in launches for s, _ in ls)
    passed = sum(len(ls) for ls in launches) - skipped + 1
    assert f"{passed} passed, {skipped} skipped" in r.stdout.splitlines()[-1], r.stdout.splitlines()[-1]


def test_a_wrong_kernels_golden_test_fails_with_a_replay_command_that_runs(tmp_path):
    project = _user_project(tmp_path)
    r = _pytest(project, "-q", "--nvfp4-backend", "kernels.mine:Halved", "-k", "stale-tail-127-splits2",
                "--junitxml", str(tmp_path / "junit.xml"))
    assert r.returncode == 1 and r.stdout.splitlines()[-1].startswith("1 failed, "), r.stdout + r.stderr
    # (pytest repeats the message in its short summary where CI is set)
    replay = sorted({line for line in r.stdout.splitlines() if line.startswith("replay: ")})
    assert replay == [f"replay: python -m nvfp4_suite.vectors replay {ROOT / 'vectors/data/010-stale-tail-127.npz'} "
                      "--backend kernels.mine:Halved --splits 2 --xcds 0"], r.stdout
    assert "test_golden[kernels.mine:Halved-010-stale-tail-127-splits2]" in (tmp_path / "junit.xml").read_text()
    cmd = replay[0].removeprefix("replay: ").split()
    rr = _run([sys.executable, *cmd[1:]], project)
    assert rr.returncode == 1 and "FAIL" in rr.stdout, rr.stdout + rr.stderr


def test_a_wrong_kernels_generated_test_saves_the_minimised_problem(tmp_path):
    project = _user_project(tmp_path)
    r = _pytest(project, "-q", "--nvfp4-backend", "kernels.mine:Halved", "-k", "test_generated",
                "--nvfp4-examples", "5")
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout + r.stderr
    saved = list((project / ".repro").glob("*.npz"))
    assert len(saved) == 1 and f"saved: {saved[0]}" in r.stdout, r.stdout
    assert f"replay: python -m nvfp4_suite.vectors replay {saved[0]} --backend kernels.mine:Halved" in r.stdout


def test_a_spec_that_does_not_load_or_cannot_run_here_is_no_verdict_exit_2_as_in_check(tmp_path):
    project = _user_project(tmp_path)
    (project / "kernels" / "off.py").write_text(
        "from kernels.mine import Backend\n\n\nclass Off(Backend):\n    def available(self):\n"
        "        return 'no such device here'\n")
    r = _pytest(project, "-q", "--nvfp4-backend", "kernels.nope:Backend")
    assert r.returncode == 2 and "NO VERDICT for --nvfp4-backend kernels.nope:Backend: cannot load backend " \
        "'kernels.nope:Backend'" in r.stdout + r.stderr, r.stdout + r.stderr
    r = _pytest(project, "-q", "--nvfp4-backend", "kernels.off:Off")
    assert r.returncode == 2 and "not available here: no such device here" in r.stdout + r.stderr, \
        r.stdout + r.stderr


def test_without_nvfp4_backend_the_plugin_adds_and_imports_nothing(tmp_path):
    # What the plugin imports is what a run loads with it beyond a run without
    # it: other plugins of the environment (a GPU runner's pytest-benchmark,
    # say) may import numpy themselves.
    (tmp_path / "test_other.py").write_text(
        "import pathlib\nimport sys\n\n\ndef test_other():\n"
        "    heavy = sorted(m for m in sys.modules if m.startswith(('nvfp4_suite.kernels', "
        "'nvfp4_suite.vectors.engine.check', 'numpy', 'hypothesis', 'torch')))\n"
        "    pathlib.Path('loaded.txt').write_text('\\n'.join(heavy))\n")
    loaded = {}
    for label, args in (("with", ()), ("without", ("-p", "no:nvfp4_suite"))):
        r = _pytest(tmp_path, "-q", *args)
        assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("1 passed"), r.stdout + r.stderr
        loaded[label] = set((tmp_path / "loaded.txt").read_text().split())
    assert not [m for m in loaded["with"] if m.startswith("nvfp4_suite")], loaded["with"]
    assert loaded["with"] == loaded["without"], sorted(loaded["with"] ^ loaded["without"])
    r = _pytest(tmp_path, "--help")
    assert "--nvfp4-backend=SPEC" in r.stdout


# --- dependency ranges ----------------------------------------------------------

def _pins(path: Path) -> dict:
    return {name.lower(): v for name, v in (line.split("==") for line in path.read_text().splitlines()
                                            if line and not line.startswith("#"))}


def _requirements():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in project["project"]["dependencies"]]
    extras = {name: [Requirement(r) for r in rs] for name, rs in project["project"]["optional-dependencies"].items()}
    build = [Requirement(r) for r in project["build-system"]["requires"]]
    return reqs, extras, build


def test_dependencies_are_ranges_with_lower_bounds_and_no_upper_bound():
    reqs, extras, build = _requirements()
    for r in reqs + [r for rs in extras.values() for r in rs] + build:
        ops = {s.operator for s in r.specifier}
        assert ops == {">="}, f"{r}: a range with one lower bound, no pin and no upper bound"


def test_the_lower_bounds_file_installs_each_ranges_lowest_version():
    # .ci/run installs .ci/lower-bounds.txt and tests the suite on it: it must be
    # exactly the lower bounds (runtime, test extra, build backend; the torch,
    # triton and flydsl extras are tested at CI's versions and on the GPU machine).
    from packaging.version import Version

    reqs, extras, build = _requirements()
    low = {r.name.lower(): Version(next(iter(r.specifier)).version) for r in reqs + extras["test"] + build}
    assert {k: Version(v) for k, v in _pins(ROOT / ".ci" / "lower-bounds.txt").items()} == low


def test_the_constraints_pin_every_dependency_inside_its_range():
    reqs, extras, build = _requirements()
    pins = _pins(ROOT / ".ci" / "constraints.txt")
    for r in reqs + [r for rs in extras.values() for r in rs]:
        assert r.name.lower() in pins, f"{r.name} has no pin in .ci/constraints.txt"
        assert r.specifier.contains(pins[r.name.lower()]), f"{r.name}=={pins[r.name.lower()]} is outside {r}"
    assert pins["torch"] == "2.13.0", "CI's torch is the CPU build on disk; another version downloads GBs"


def test_ci_runs_the_readmes_second_command_verbatim_with_the_constraints():
    second = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].splitlines()[1]
    assert "-c .ci/constraints.txt" in second
    assert second in (ROOT / ".ci" / "run").read_text().splitlines()


def test_every_test_file_ci_names_exists():
    # A renamed test file named in .ci/run fails CI after the whole build, as
    # "file or directory not found" (tests/test_compare.py did, after its split).
    named = re.findall(r"tests/[\w/]+\.py", (ROOT / ".ci" / "run").read_text())
    assert named, ".ci/run names the lower-bound step's test files"
    assert [n for n in named if not (ROOT / n).is_file()] == []


def _versions(python) -> dict:
    r = _run([str(python), "-c", "import importlib.metadata as m, json; print(json.dumps("
              "{d.metadata['Name'].lower(): d.version for d in m.distributions()}))"], ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_installs_offline_into_a_foreign_environment_and_replaces_nothing(tmp_path):
    """The suite installed with pip, without network (``--no-index``), into an
    environment that holds other versions of numpy, hypothesis and torch than
    CI's constraints: pip must be satisfied with what is there. The numpy and
    hypothesis are real packages (.ci/run's lower-bound venv, ``NVFP4_FOREIGN_SITE``,
    seen through a .pth file); torch is an installed-distribution record of
    version 2.11 (the GPU machine's), metadata only: pip decides from metadata,
    and a real second torch is GBs."""
    site = os.environ.get("NVFP4_FOREIGN_SITE")
    if not site:
        if os.environ.get("CI"):
            pytest.fail("NVFP4_FOREIGN_SITE is not set: .ci/run sets it to its lower-bound venv's site-packages")
        pytest.skip("NVFP4_FOREIGN_SITE not set (a site-packages with other numpy and hypothesis; .ci/run sets it)")
    env = tmp_path / "foreign"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    py = env / "bin" / "python"
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], ROOT)
                   .stdout.strip())
    (purelib / "foreign.pth").write_text(site + "\n")
    record = purelib / "torch-2.11.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")
    (record / "INSTALLER").write_text("pip\n")
    (record / "RECORD").write_text("")
    before = _versions(py)
    pins = _pins(ROOT / ".ci" / "constraints.txt")
    for name in ("numpy", "hypothesis", "torch"):
        assert before[name] != pins[name], f"the foreign {name} must differ from CI's {pins[name]}"

    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index", "--no-build-isolation"]
    report = tmp_path / "report.json"
    r = _run(pip + ["--dry-run", "--report", str(report), "-e", f"{ROOT}[torch]"], ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]] == ["nvfp4-sparse-decode-suite"]
    r = _run(pip + ["-e", f"{ROOT}[torch]"], ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    after = _versions(py)
    assert {k: after[k] for k in before} == before
    r = _run([str(py), "-m", "nvfp4_suite.vectors", "list", "--flag", "stale-tail"], tmp_path)
    assert r.returncode == 0 and "stale-tail" in r.stdout, r.stdout + r.stderr


# --- static checks: they see the folders under their import name -----------------

def test_the_type_checkers_link_folder_maps_each_folder_as_the_install_does():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    base = ROOT / tool["mypy"]["mypy_path"]
    for name, folder in tool["setuptools"]["package-dir"].items():
        assert (base / name.replace(".", "/")).resolve() == (ROOT / folder).resolve(), name


def test_mypy_resolves_nvfp4_suite_imports_to_the_folders(tmp_path):
    pytest.importorskip("mypy", reason="the lint extra is not installed")
    # A deliberate type error about a suite class: mypy can only name the class's
    # type if it found nvfp4_suite.reference (reference/problem.py) through the configuration.
    probe = tmp_path / f"probe_{uuid.uuid4().hex}.py"  # a module name mypy's cache has not seen
    probe.write_text("from nvfp4_suite.reference import DecodeProblem\nx: int = DecodeProblem\n")
    r = _run([sys.executable, "-m", "mypy", str(probe)], ROOT)
    want = f'{probe}:2: error: Incompatible types in assignment (expression has type "type[DecodeProblem]"'
    assert want in r.stdout, r.stdout + r.stderr
    assert "import-not-found" not in r.stdout and "Cannot find implementation" not in r.stdout, r.stdout


def test_ruff_sorts_nvfp4_suite_as_the_projects_own_imports():
    pytest.importorskip("ruff", reason="the lint extra is not installed")
    ruff = [sys.executable, "-m", "ruff", "check", "--select", "I", "--stdin-filename", "tests/x.py", "-"]
    mixed = subprocess.run(ruff, input="import numpy\nfrom nvfp4_suite import kernels\n", cwd=ROOT,
                           capture_output=True, text=True)
    apart = subprocess.run(ruff, input="import numpy\n\nfrom nvfp4_suite import kernels\n", cwd=ROOT,
                           capture_output=True, text=True)
    assert mixed.returncode == 1 and "I001" in mixed.stdout, mixed.stdout + mixed.stderr
    assert apart.returncode == 0, apart.stdout + apart.stderr


# --- static checks: clean over the tree, as CI runs them ----------------------------

def _lint_tool(module):
    # CI installs the lint extra: there a missing tool is a failure, not a skip.
    if os.environ.get("CI") == "true":
        __import__(module)
    pytest.importorskip(module, reason="the lint extra is not installed (pip install -e \".[lint]\")")


def test_ruff_finds_nothing_in_the_tree():
    _lint_tool("ruff")
    r = _run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."], ROOT)
    findings = [line for line in r.stdout.splitlines() if re.match(r"\S+:\d+:\d+: [A-Z]+\d+ ", line)]
    assert r.returncode == 0, "ruff findings:\n" + ("\n".join(findings) or r.stdout + r.stderr)


def test_mypy_finds_nothing_in_the_package():
    _lint_tool("mypy")
    # The configuration ([tool.mypy]) names the files: the package through its link folder.
    r = _run([sys.executable, "-m", "mypy"], ROOT)
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    assert r.returncode == 0, "mypy errors:\n" + ("\n".join(errors) or r.stdout + r.stderr)

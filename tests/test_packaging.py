"""pyproject.toml: the suite installs under one import name, ``nvfp4_suite``, so
that a kernel project with its own ``kernels``, ``reference`` or ``vectors``
package can install the suite and check its kernel."""

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

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


def _pytest_route(project, attr):
    # From the user's project root, with the suite's tests named by path: the
    # suite's folders must not shadow the user's `kernels` (pytest runs in
    # importlib mode and never puts the suite's root on sys.path).
    return _run([sys.executable, "-m", "pytest", "-q", str(ROOT / "tests" / "test_conformance.py"),
                 "-k", "conforms_on_generated", "--backend", f"kernels.mine:{attr}", "--rootdir", str(ROOT)],
                project, HYPOTHESIS_PROFILE="ci")


def test_the_pytest_route_checks_a_user_kernel_from_its_project(tmp_path):
    project = _user_project(tmp_path)
    r = _pytest_route(project, "Backend")
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    r = _pytest_route(project, "Halved")
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout + r.stderr

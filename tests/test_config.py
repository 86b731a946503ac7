"""nvfp4_suite.vectors.engine.config: one configuration for every front end."""

import pytest

from nvfp4_suite.kernels.protocol import DEFAULT_EXAMPLES, INTERPRETED_EXAMPLES, SHRINK_BUDGET_TIMEOUTS, Capabilities
from nvfp4_suite.reference import EXACT_P_BF16, SEED_GEOMETRY
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.engine.config import CheckConfig, catalogs_for, default_examples, examples_for, load_subject
from nvfp4_suite.vectors.engine.verdict import SetupError


@pytest.mark.parametrize("config, why", [
    (CheckConfig(examples=-1), "--examples -1: must be >= 0"),
    (CheckConfig(shape="huge"), "shape 'huge'"),
    (CheckConfig(timeout=0.0), "--timeout 0: must be > 0"),
    (CheckConfig(golden=False, examples=0), "nothing to check"),
    (CheckConfig(shape="serving", examples=0), "give --examples > 0"),
])
def test_a_configuration_that_can_judge_nothing_says_why(config, why):
    assert why in config.problems()


def test_the_default_example_count_comes_from_the_declared_capabilities():
    assert default_examples(Capabilities()) == DEFAULT_EXAMPLES
    assert default_examples(Capabilities(interpreted=True)) == INTERPRETED_EXAMPLES
    s = load_subject(CheckConfig(backend="emulate"))
    assert examples_for(CheckConfig(), s) == DEFAULT_EXAMPLES and examples_for(CheckConfig(examples=3), s) == 3


def test_the_subject_is_judged_in_the_named_arithmetic_and_isolated_only_when_asked():
    s = load_subject(CheckConfig(backend="emulate"))
    assert s.geometry == SEED_GEOMETRY and s.timeout is None and s.shrink_budget_s is None
    s = load_subject(CheckConfig(backend="emulate", arithmetic="exact-p-bf16", timeout=2.0))
    assert s.geometry == EXACT_P_BF16 and s.timeout == 2.0 and s.shrink_budget_s == SHRINK_BUDGET_TIMEOUTS * 2.0
    s.close()
    with pytest.raises(SetupError, match="arithmetic 'exactly'"):
        load_subject(CheckConfig(backend="emulate", arithmetic="exactly"))
    with pytest.raises(SetupError, match=r"--splits \[9\]: backend emulate supports"):
        load_subject(CheckConfig(backend="emulate", splits=(9,)))


def test_the_catalogs_are_the_built_in_one_then_each_given_folder_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert catalogs_for(CheckConfig()) == [(catalog.HERE, "built-in")]
    assert catalogs_for(CheckConfig(golden=False)) == [] and catalogs_for(CheckConfig(shape="serving")) == []
    (tmp_path / catalog.PROJECT_DEFAULT).mkdir()
    roots = [r for r, _ in catalogs_for(CheckConfig())]
    assert roots == [catalog.HERE, catalog.project_root()]
    given = [r for r, _ in catalogs_for(CheckConfig(catalogs=("a", "a", str(catalog.HERE))))]
    assert given == [catalog.HERE, catalog.resolve("a")]

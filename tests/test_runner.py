"""nvfp4_suite.vectors.cli.runner: whatever escapes a command becomes a verdict, never exit 0 or 1."""

import pytest

from nvfp4_suite import kernels
from nvfp4_suite.reference import ReferenceBudgetError
from nvfp4_suite.reference.layout import LayoutError
from nvfp4_suite.vectors.catalog.casefile import CaseFileError
from nvfp4_suite.vectors.cli.runner import exit_code, guarded, outcome
from nvfp4_suite.vectors.engine import interrupts
from nvfp4_suite.vectors.engine.verdict import Kind, SetupError, Verdict


def _raise(e):
    def fn():
        raise e
    return fn


@pytest.mark.parametrize("error", [SetupError("no backend"), CaseFileError("bad file"), LayoutError("bad layout"),
                                   kernels.BackendError("no spec"), ReferenceBudgetError("too big")])
def test_an_error_that_stops_a_check_before_it_judges_is_no_verdict_with_its_message(error, capsys):
    v = outcome(_raise(error))
    assert v.kind is Kind.NO_VERDICT and v.exit_code == 2 and str(error) in v.reason
    assert f"error: {error}" in capsys.readouterr().err


def test_an_unexpected_exception_is_suite_error_exit_3_with_the_traceback(capsys):
    v = outcome(_raise(KeyError("oops")))
    assert v.kind is Kind.SUITE_ERROR and v.exit_code == 3 and "KeyError" in v.reason
    err = capsys.readouterr().err
    assert "SUITE ERROR: KeyError" in err and "Traceback" in err and "not a verdict on the backend" in err


def test_interruptions_and_exits_from_backend_code_are_no_verdict(capsys):
    assert outcome(_raise(interrupts.Interrupted("SIGTERM"))) == Verdict(Kind.NO_VERDICT, "interrupted (SIGTERM)",
                                                                         interrupted=True)
    assert outcome(_raise(KeyboardInterrupt())).interrupted
    v = outcome(_raise(SystemExit(0)))
    assert v.kind is Kind.NO_VERDICT and "SystemExit(0)" in v.reason
    assert "interrupted: no verdict" in capsys.readouterr().err


def test_a_commands_own_result_passes_through_and_guarded_gives_its_exit_code():
    assert outcome(lambda: 1) == 1 and exit_code(Verdict(Kind.FLAKY)) == 1 and exit_code(0) == 0
    assert guarded(lambda: Verdict(Kind.CONFORMANT)) == 0
    assert guarded(_raise(ZeroDivisionError("x"))) == 3

"""The one way every command of the suite ends: its verdict, or why there is none.

``outcome(fn)`` runs a command's body and turns whatever escapes it into a
``Verdict`` (``nvfp4_suite.vectors.engine.verdict``): a setup error, an
unreadable catalog or a reference over its memory budget is NO VERDICT (exit
2) with the reason; an interruption (Ctrl-C, SIGTERM, stdout's reader gone)
that escapes the engine is NO VERDICT; anything else the suite did not expect
is SUITE ERROR (exit 3), printed with its traceback, never exit 0 or 1 (a
kernel verdict). Commands that judge return their ``Verdict``; the others
(``regen``, ``verify``, ``list``, ...) return an exit status.
``guarded(fn)`` is the same for a tool's ``main`` (the simulator's
commands, the serving benchmark): its exit status.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

from nvfp4_suite import kernels
from nvfp4_suite.reference import ReferenceBudgetError
from nvfp4_suite.reference.layout import LayoutError
from nvfp4_suite.vectors.catalog.casefile import CaseFileError
from nvfp4_suite.vectors.engine import interrupts
from nvfp4_suite.vectors.engine.verdict import Kind, SetupError, Verdict, no_verdict

# What ends a command with NO VERDICT and the message alone (no traceback): the
# suite could not start judging, for a reason it names.
NO_VERDICT_ERRORS = (SetupError, CaseFileError, ReferenceBudgetError, LayoutError, kernels.BackendError)


def silence_stdout() -> None:
    """Silence stdout after a ``BrokenPipeError`` (``... | head``), so that
    Python's own flush at exit raises no second error."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def outcome(fn: Callable[[], Verdict | int], before_print: Callable[[], None] | None = None) -> Verdict | int:
    """Run ``fn`` (a command's body); its result, or the ``Verdict`` of what
    escaped it (see the module note). ``before_print``: called before an
    error is printed (a progress bar is erased)."""
    def say(msg: str) -> None:
        if before_print is not None:
            before_print()
        print(msg, file=sys.stderr, flush=True)

    try:
        res = fn()
        sys.stdout.flush()  # a reader that went away (`| head`) shows here, not at exit
        return res
    except NO_VERDICT_ERRORS as e:
        say(f"error: {e}")
        return no_verdict(f"error: {e}")
    except BrokenPipeError:
        silence_stdout()
        return no_verdict("stdout's reader went away", interrupted=True)
    except KeyboardInterrupt as e:
        why = e.reason if isinstance(e, interrupts.Interrupted) else "KeyboardInterrupt"
        say(f"\ninterrupted{f' ({why})' if isinstance(e, interrupts.Interrupted) else ''}: no verdict")
        return no_verdict(f"interrupted ({why})", interrupted=True)
    except SystemExit as e:
        # Backend calls are guarded by the harness; this is code reached some
        # other way (a backend attribute, a factory at run time) ending the
        # process. It is never a verdict.
        say(f"error: SystemExit({e.code!r}) was raised during the run by code it called (a backend's "
            "attributes?); nothing was judged")
        return no_verdict(f"SystemExit({e.code!r}) raised during the run")
    except Exception as e:  # noqa: BLE001 - the suite's own failure: never a kernel verdict
        say(f"SUITE ERROR: {type(e).__name__}: {e}\n" + "".join(traceback.format_exc()).rstrip() + "\n"
            "This is an error of the suite, not a verdict on the backend: please report it with the "
            "traceback above.")
        return Verdict(Kind.SUITE_ERROR, f"{type(e).__name__}: {e}")


def exit_code(result: Verdict | int) -> int:
    """The process exit status of a command's result."""
    return result.exit_code if isinstance(result, Verdict) else int(result)


def guarded(fn: Callable[[], Verdict | int]) -> int:
    """``outcome`` of ``fn`` as an exit status, with the interruption handlers
    installed for its length (``interrupts.installed``)."""
    with interrupts.installed():
        return exit_code(outcome(fn))

"""nvfp4_suite.vectors.engine.interrupts: the user's signals told apart from a backend's
own KeyboardInterrupt, and a closed stdout pipe seen."""

import signal
import subprocess
import sys

import pytest

from nvfp4_suite.vectors.engine import interrupts


def test_a_code_raised_keyboardinterrupt_is_not_the_users_while_installed():
    with interrupts.installed():
        assert not interrupts.from_user(KeyboardInterrupt())
    assert interrupts.from_user(KeyboardInterrupt())  # without handlers one cannot tell


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_is_the_users_interrupt_and_names_itself(sig):
    with interrupts.installed():
        with pytest.raises(interrupts.Interrupted) as e:
            signal.raise_signal(sig)
        assert interrupts.from_user(e.value) and e.value.reason == sig.name
    assert signal.getsignal(signal.SIGINT) is not interrupts._handler


def test_reader_gone_sees_a_closed_pipe():
    code = ("import time, sys\nfrom nvfp4_suite.vectors.engine import interrupts\n"
            "print(interrupts.reader_gone(), file=sys.stderr, flush=True)\nprint('x', flush=True)\n"
            "time.sleep(1)\nprint(interrupts.reader_gone(), file=sys.stderr)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "x\n"
    p.stdout.close()
    assert p.stderr.read().split() == ["False", "True"] and p.wait(60) == 0


def test_a_signal_whose_exception_was_swallowed_is_raised_again_at_the_next_check():
    with interrupts.installed():
        try:
            signal.raise_signal(signal.SIGTERM)
        except KeyboardInterrupt:
            pass  # code on the way (a library's own except clause) caught it
        with pytest.raises(interrupts.Interrupted, match="SIGTERM"):
            interrupts.stop_if_asked()
    interrupts.stop_if_asked()  # handlers gone, flag reset: nothing pending


def test_a_signal_inside_a_gc_callback_is_not_raised_there_but_at_the_next_check():
    # In a process of its own: the callback must be gc's, and the signal its handler's.
    code = ("import gc, signal, sys\nfrom nvfp4_suite.vectors.engine import interrupts\n"
            "out = []\n"
            "def cb(phase, info):\n"
            "    if phase == 'start' and not out:\n"
            "        out.append(1); signal.raise_signal(signal.SIGINT); out.append(2)\n"
            "gc.callbacks.append(cb)\n"
            "with interrupts.installed():\n"
            "    gc.collect()\n"
            "    try:\n"
            "        interrupts.stop_if_asked()\n"
            "    except interrupts.Interrupted as e:\n"
            "        print('raised at the check:', e.reason, out)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "raised at the check: SIGINT [1, 2]", r.stdout + r.stderr
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr

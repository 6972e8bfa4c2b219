"""Which Python functions run inside a call. Tests that prove a traced op
enters no Python (its Meta kernel, memo or layout done in C++) use it."""

import sys


def python_calls(fn, include=lambda filename: True):
    """The names of the Python functions that run in fn(), in call order, of
    those whose source file `include` accepts."""
    calls = []

    def profile(frame, event, arg):
        if event == "call" and include(frame.f_code.co_filename):
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls

"""Leaving a process that ran gloo collectives without the interpreter's teardown.

A torchrun rank that has finished its work, completed every collective and written its results
can still die at interpreter exit: torch's gloo backend aborts it with "terminate called without
an active exception" (SIGABRT, exit status -6). A gloo worker thread still holding a finished
work's tensors or callbacks releases them while the interpreter is being finalized; taking the
GIL then ends that thread by a forced unwind through a `noexcept` destructor, and C++ terminates
the process (upstream: pytorch PR 179291, abandoned). Measured on 2 cores with torch 2.14.1: a
plain DDP script without `destroy_process_group` aborted in 1 of 10 runs; the tests that ran
`distsgd.wrap` under torchrun failed CI so. With this module, 0 of 30 runs each of a `wrap` +
`finalize` script without `destroy_process_group` and of `python -m distsgd bench --launcher env`
under torchrun, on a loaded machine (2026-11-26).

Once every collective is complete and every file is flushed, nothing is left for that teardown
to do, so a rank leaves with `os._exit`, which skips it:

- the kit's own entry point (`python -m distsgd`, e.g. `train --launcher env` or `worker` under
  torchrun or srun) knows its exit status and leaves through `exit_process(status)`;
- a user's script that calls `distsgd.finalize` leaves so at its end (`leave_at_exit`), but only
  when its `__main__` module ran to its last line: an uncaught exception or a `sys.exit(n)` keeps
  Python's own exit and its status, so a status is never changed.

Ranks started by the kit's own launcher (`distsgd.training.launch`) are multiprocessing children, which
already leave with `os._exit`.
"""
from __future__ import annotations

import atexit
import dis
import gc
import io
import os
import sys
import threading
from types import FrameType
from typing import NoReturn

_joined = False                 # this process joined a process group through `comm.join_group`
_registered = False             # `leave_at_exit` has registered its handler


def mark_joined() -> None:
    """Record that this process joined a process group (`join_group` calls it)."""
    global _joined
    _joined = True


def _leave(status: int) -> NoReturn:
    """What interpreter exit would do before its teardown, then `os._exit(status)`: the atexit
    handlers (logging's, a tracker's), and every open Python file object flushed (standard
    output and error, a file the script left open), as their finalizers would."""
    atexit._run_exitfuncs()
    for obj in gc.get_objects():
        if issubclass(type(obj), io.IOBase):
            try:
                if not obj.closed and obj.writable():
                    obj.flush()
            except (OSError, ValueError):       # a pipe whose reader is gone, a detached buffer
                pass
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(status)


def exit_process(status: int) -> NoReturn:
    """Exit with `status`: after a process group was joined here, with no interpreter teardown
    (`_leave`, so no gloo abort); otherwise `sys.exit`."""
    if _joined:
        _leave(status)
    sys.exit(status)


def _main_frame(frame: FrameType | None) -> FrameType | None:
    """The frame executing the `__main__` module's own code, among `frame` and its callers."""
    main = sys.modules.get("__main__")
    while frame is not None:
        if frame.f_code.co_name == "<module>" and main is not None and frame.f_globals is vars(main):
            return frame
        frame = frame.f_back
    return None


def ran_to_the_end(frame: FrameType) -> bool:
    """Whether a finished module frame returned from its last line (its last instruction a
    return) rather than left by an exception (SystemExit included: the status is then not known)."""
    return dis.opname[frame.f_code.co_code[frame.f_lasti]] in ("RETURN_VALUE", "RETURN_CONST")


def leave_at_exit() -> None:
    """Have this process leave with status 0 and no interpreter teardown (`_leave`) when its
    `__main__` module has run to its end with no uncaught exception; any other ending keeps
    Python's own exit and status. Called from the script's main thread (`distsgd.finalize`); a
    second call does nothing.

    The decision is taken at interpreter exit by an atexit handler registered as the main thread
    ends (threading's shutdown hooks run before atexit's), so that it is the last one registered
    and runs first: `_leave` then runs every other handler once, in order."""
    global _registered
    frame = _main_frame(sys._getframe(1))
    if _registered or frame is None:
        return
    _registered = True

    def leave() -> None:
        if getattr(sys, "last_value", None) is None and ran_to_the_end(frame):
            atexit.unregister(leave)
            _leave(0)

    threading._register_atexit(lambda: atexit.register(leave))

"""`distsgd.comm.teardown`: a rank leaves without the interpreter's teardown (where gloo aborts a
finished process) only when its exit status is known, and keeps every other ending as Python's:
the status, the atexit handlers (each once, in order) and the flushed files are the same."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distsgd.comm import teardown

SCRIPT = '''
import atexit, importlib.util, os, sys

spec = importlib.util.spec_from_file_location("teardown", sys.argv[3])   # alone: no torch import
teardown = importlib.util.module_from_spec(spec)
spec.loader.exec_module(teardown)

atexit.register(lambda: print("early handler"))


class Marker:
    def __del__(self, _write=os.write):            # runs in the interpreter's teardown only
        _write(2, b"interpreter teardown\\n")


marker = Marker()
unclosed = open(sys.argv[2], "w")
unclosed.write("written")                            # flushed at exit, never closed


def main():
    mode = sys.argv[1]
    if mode != "kit-unjoined":
        teardown.leave_at_exit()
    atexit.register(lambda: print("late handler"))
    if mode == "exit3":
        sys.exit(3)
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "kit":
        teardown.mark_joined()
    if mode.startswith("kit"):
        teardown.exit_process(5)


main()
print("end of script")
'''

# mode: (status, stdout, whether the interpreter's teardown ran)
CASES = {
    "end": (0, "end of script\nlate handler\nearly handler\n", False),
    "exit3": (3, "late handler\nearly handler\n", True),
    "raise": (1, "late handler\nearly handler\n", True),
    "kit": (5, "late handler\nearly handler\n", False),
    "kit-unjoined": (5, "late handler\nearly handler\n", True),
}


@pytest.mark.parametrize("mode", CASES)
def test_a_script_leaves_without_teardown_only_when_its_status_is_known(tmp_path: Path, mode: str):
    (tmp_path / "script.py").write_text(SCRIPT)
    out = subprocess.run([sys.executable, "script.py", mode, "file.txt", str(teardown.__file__)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    status, stdout, torn_down = CASES[mode]
    assert (out.returncode, out.stdout) == (status, stdout), out.stderr
    assert ("interpreter teardown" in out.stderr) == torn_down, out.stderr
    assert ("RuntimeError: boom" in out.stderr) == (mode == "raise")
    assert (tmp_path / "file.txt").read_text() == "written"

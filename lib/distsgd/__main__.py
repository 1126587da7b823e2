"""`python -m distsgd`: the command line (`distsgd.cli`). A rank under torchrun or srun leaves
without the interpreter's teardown, where gloo can abort a finished process (`comm.teardown`)."""
from .cli import main
from .comm.teardown import exit_process

exit_process(main())

"""`python -m distsgd`: the command line (`distsgd.cli`)."""
import sys

from .cli import main

sys.exit(main())

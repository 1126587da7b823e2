"""The experiments of the notebooks: one module per paper's notebook, holding the runs, tables and
claim decisions its cells call (issue 36: thin notebooks), so that a notebook is its parameters,
the calls, the figures and the verdicts. Helpers more than one notebook uses live in
`distsgd.verdicts.analysis`. Each function is tested in tests/test_experiments_<module>.py."""

# distsgd: `make test` (what CI runs) and `make reproduce` (every notebook, quick profile).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PROFILE ?= quick
JOBS   ?= 1
PYTEST_ARGS ?= --durations=15
SUITE_JOBS ?= 3
CONSTRAINTS := constraints.txt
KERNEL ?= distsgd

.PHONY: venv kernel bytecode test test-unit test-notebooks test-params test-cluster rehearse validate reproduce report docs list clean

# The venv is rebuilt when pyproject.toml (the ranges) or constraints.txt (the exact versions the
# kit is tested with) changes; pip installs the ranges under the constraints.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e ".[test]"
	touch $@

venv: $(VENV)/.installed

# A Jupyter kernel named $(KERNEL) running this venv's Python, for JupyterLab elsewhere and for
# `reproduce/run.py --kernel $(KERNEL)` (installed for this user: ~/.local/share/jupyter/kernels).
kernel: venv
	$(PY) -m ipykernel install --user --name $(KERNEL) --display-name "Python ($(KERNEL))"

# The library's bytecode, written once: every kernel, forkserver, rank and CLI run imports lib/, and
# with PYTHONDONTWRITEBYTECODE set (CI's environment) each would compile it again (~1.8 s of CPU).
bytecode: venv
	$(PY) -m compileall -q lib

# The timed suites one at a time, the others three at a time beside them at idle priority
# (tests/run_suites.py), and the minutes of each against CI's budget.
test: venv bytecode
	$(PY) tests/run_suites.py --jobs $(SUITE_JOBS) -- $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-notebooks: venv
	$(PY) -m pytest --nbval-lax notebooks $(PYTEST_ARGS)

# Every notebook at nproc 6 with another seed (dry-run length); also part of `test`.
test-params: venv
	$(PY) -m pytest tests/test_notebook_params.py $(PYTEST_ARGS)

# The cluster path (also part of `test`): full-profile dry run, SLURM, torchrun over namespaces.
test-cluster: venv
	$(PY) -m pytest tests/test_dry_run.py tests/test_cluster_env.py tests/test_cluster_slurm.py tests/test_cluster_netns.py $(PYTEST_ARGS)

# The multi-node path rehearsed on this machine (root, Linux; 15-45 minutes on 2 cores; not part of `test`):
# a SLURM cluster of three network-namespace nodes, notebook 01 across them, requeued once mid-run, then
# notebook 07 (its benchmark across them), checked and torn down; its result in
# reproduce/rehearsal/last_run.csv (reproduce/rehearse.py).
rehearse: venv bytecode
	$(PY) reproduce/rehearse.py

# The simulator against measured step times on this machine (every schedule, p = 2 and 4; asserted
# within 15% at p <= cores): not part of `test`, ~7 minutes of timing that need a quiet machine
# (tests/test_timeline_validation.py; docs/validation.md has the runs); and the public real-cluster tables
# recomputed and compared with the committed reproduce/validation/public_error.csv (about a minute).
validate: venv
	$(PY) -m pytest tests/test_timeline_validation.py tests/test_timeline_public_tables.py -m validation $(PYTEST_ARGS)

# The quick profile also regenerates the README's verdict table from the fresh claims tables.
reproduce: venv bytecode
	$(PY) reproduce/run.py --profile $(PROFILE) --jobs $(JOBS) $(if $(filter quick,$(PROFILE)),--update-readme)

# REPORT.md/HTML and the README's verdict table from the committed figures/, running nothing.
report: venv
	$(PY) reproduce/run.py --profile $(PROFILE) --report-only $(if $(filter quick,$(PROFILE)),--update-readme)

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link, a missing anchor
# or a page outside the nav fails (tests/test_docs.py runs the same build in `make test`).
docs: venv
	$(PY) -m mkdocs build --strict

list: venv
	$(PY) -m distsgd list

clean:
	rm -rf results reproduce/runs .pytest_cache site

"""Claims, verdicts and headlines: registered tests decided on runs and projections, the report and the plots."""

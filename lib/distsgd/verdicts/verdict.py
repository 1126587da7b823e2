"""The three verdicts a claim (`distsgd.verdicts.claims`) and a paper's headline (`distsgd.verdicts.headlines`) end in:
reproduced (the interval lies on the claim's side of its threshold), contradicted (on the other
side), inconclusive (it contains the threshold, or a precheck said the run cannot decide it)."""

REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"
VERDICTS = (REPRODUCED, CONTRADICTED, INCONCLUSIVE)

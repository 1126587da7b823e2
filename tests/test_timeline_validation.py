"""The timeline simulator against measured runs on this machine (`distsgd.systems.timeline.validate`).

Every schedule of the benchmark and the local-update algorithms it can time, at p = 2 and 4, on the
emulated network where the emulation has headroom: the simulator's step time (profile scaled to
the compute measured at that p, the benchmark's own network, the per-call overheads measured at the
start of the run, `timeline.costs`) within `timeline.validate.RESOLUTION` (15%)
of the measured median. The failure message is the table of every pair.
"""
from pathlib import Path

import pandas as pd
import pytest

from distsgd.systems.layer_profile import Layer, Profile
from distsgd.paths import repo_root
from distsgd.systems.timeline import validate as v


def _bench_rows() -> pd.DataFrame:
    """A fake benchmark result: one case, two repeats, and its compute baseline."""
    common = dict(model="toy", params="{}", nproc=2, grad_bytes=4000, batch_size=4, compute_s=0.01)
    rows = [dict(common, label="no overlap", algo="no_overlap", net_name="n", net="8Mbit,0us", repeat=r, step_s=s)
            for r, s in enumerate((0.020, 0.022, 0.030))]
    rows.append(dict(common, label="compute", algo="compute", net_name="none", net="", repeat=0, step_s=0.01))
    return pd.DataFrame(rows)


def _toy() -> Profile:
    layer = Layer(name="fc", tensors=["fc.weight"], tensor_numel=[1000], tensor_bytes=[4000],
                  forward_s=1.0, backward_s=2.0, update_s=1.0)
    return Profile("toy", 4, (10,), "cpu", "measured", "test", [layer])


def test_predict_scales_the_profile_to_the_measured_compute():
    """Predicted = measured compute (profile scaled) + the all-reduce the benchmark's network
    charges after backward; measured = the median over repeats."""
    table = v.predict(_bench_rows(), {"toy": _toy()})
    r = table.iloc[0]
    assert r.measured_s == pytest.approx(0.022)
    # all-reduce of 4000 B over 2 ranks at 1 MB/s: 2*(1/2)*4000/1e6 = 4 ms, after 10 ms of compute
    assert r.predicted_s == pytest.approx(0.014, rel=1e-6)
    assert r.residual == pytest.approx(0.014 / 0.022 - 1)


def test_predict_unscaled_keeps_the_profiles_own_compute():
    """scale=False (the GPU check, `validate_gpu`): the profile's 4 s of compute, not the measured
    10 ms, plus the same 4 ms all-reduce."""
    r = v.predict(_bench_rows(), {"toy": _toy()}, scale=False).iloc[0]
    assert r.predicted_s == pytest.approx(4.004, rel=1e-6)


# Not a CI gate (marker `validation`, deselected by default; `make validate` runs it: ~7 minutes of
# timing that need a quiet machine). It asserts the pairs `validate` counts as validation: an
# emulable network and p <= this machine's cores (the module docstring of `timeline.validate` says
# why); the others are printed. docs/validation.md has the runs.
@pytest.mark.multiproc
@pytest.mark.validation
def test_simulator_predicts_every_schedule_within_the_resolution():
    table, bench, headroom = v.validate(models=("mlp",), nprocs=(2, 4))
    v.save(table, repo_root(Path(__file__).parent) / "figures" / "10_systems_benchmark" / "timeline_validation.csv")
    report = v.report(table, v.RESOLUTION)
    ov = table.attrs["overheads"]
    print(f"overheads measured at the start: issue {1e6 * ov.issue_s:.1f} us, copy {ov.copy_Bps / 1e9:.2f} GB/s, "
          f"announced passes {', '.join(f'{k} {v:.2f}' for k, v in ov.work.items())} of a step, real transfers "
          f"{table.transfer.iloc[0]}; {table.cores.iloc[0]} cores")
    print(headroom.to_string())
    print(report)
    assert headroom.emulable.all(), f"the validation network has no emulation headroom here:\n{headroom}\n{report}"
    expected = {c["label"] for p in (2, 4) for c in v.cases_for(p)}
    assert set(table.label) == expected, report
    checked = table[table.validated]
    assert set(checked.label) == {c["label"] for c in v.cases_for(2)}, \
        f"fewer than 2 cores here: nothing can be validated\n{report}"
    bad = checked[checked.residual.abs() > v.RESOLUTION]
    assert bad.empty, f"{len(bad)} of {len(checked)} validated pairs outside ±{v.RESOLUTION:.0%}:\n{report}"


def test_fit_collective_times_recovers_the_network():
    """A real backend's all-reduce times (as `real_collective_times` tabulates them) give back
    the alpha-beta network that produced them; fewer than two sizes is refused."""
    from distsgd.comm.netmodel import NetModel
    from distsgd.comm.nccl_tests import fit_collective_times
    from distsgd.errors import ConfigError
    true = NetModel(bandwidth_Bps=2e9, latency_s=20e-6)
    sizes = [2**16, 2**20, 2**24]
    times = pd.DataFrame([dict(kind=k, nbytes=n, p=4, measured_s=true.cost("all_reduce", n, 4) * (1 if k == "all_reduce" else 9))
                          for k in ("all_reduce", "all_gather") for n in sizes])
    fit = fit_collective_times(times)
    assert fit.bandwidth_Bps == pytest.approx(2e9, rel=1e-6)
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-6)
    with pytest.raises(ConfigError):
        fit_collective_times(times[times.nbytes == 2**20])



def test_predict_gpu_scales_to_the_devices_time_and_charges_the_host():
    """The GPU check's rule (`predict_gpu`): the profile (4 s) scaled to the device's own step (10 ms);
    the host needs 2 x that (20 ms) plus 1 ms per collective: the compute row predicts the host's
    20 ms, WFBP (one tensor: one collective, no transfer at p = 1) 21 ms; the plain prediction is the
    unscaled profile without host costs."""
    common = dict(model="toy", params="{}", nproc=1, grad_bytes=4000, batch_size=4, compute_s=0.02, repeat=0)
    bench = pd.DataFrame([dict(common, label="WFBP", algo="wfbp", net_name="real", net="", step_s=0.025),
                          dict(common, label="compute", algo="compute", net_name="none", net="", step_s=0.02)])
    calls = pd.DataFrame([dict(path="distsgd.Comm", calls=8, issue_s=1e-3)])
    host = pd.DataFrame([dict(model="toy", host_forward_s=0.005, host_backward_s=0.01, host_update_s=0.005,
                              device_s=0.01)])
    table = v.predict_gpu(bench, {"toy": _toy()}, calls, host, warmup=2, steps=4).set_index("label")
    assert table.loc["compute", "predicted_s"] == pytest.approx(0.020, rel=1e-9)
    assert table.loc["WFBP", "predicted_s"] == pytest.approx(0.021, rel=1e-9)
    assert table.loc["WFBP", "residual"] == pytest.approx(0.021 / 0.025 - 1, rel=1e-9)
    assert table.loc["WFBP", "predicted_plain_s"] == pytest.approx(4.0, rel=1e-9)
    assert table.loc["WFBP", "host_share"] == pytest.approx(2.0)

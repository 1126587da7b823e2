"""Check in a real browser that a notebook's claims tables read in full (issue 37, item 1).

JupyterLab (this checkout's .venv) is opened in Chromium (Playwright), the notebook is run with
Run > Run All Cells, as a user does, and then every table whose header starts with "verdict" (the
claims view, `Claims.view`) or holds "headline" (`Claims.headline`) is measured in the page:

- a cell is *cut* when its text overflows its box (scrollWidth or scrollHeight beyond the box);
- a table is *wider than the page* when it overflows the notebook's output area (a reader would
  scroll sideways to read it);
- every claim's verdict, measured value and reason in the run's claims.csv must appear, whole, in
  the page's text of the claims view.

Writes OUT/browser_check.json (the measurements, the browser's and JupyterLab's versions, the
viewport) and OUT/<notebook>_claims.png (a screenshot of the claims view); exits 1 when a check
fails. Not part of `make test` (no browser in CI). Needs Chromium and the playwright package:

    apt-get install chromium            # Debian: /usr/bin/chromium
    python -m venv /tmp/pw && /tmp/pw/bin/pip install 'playwright>=1.40,<2'
    /tmp/pw/bin/python reproduce/browser_check.py --notebook all --out /tmp/browser

The run is the quick profile's, from a copy in reproduce/browser/check.*/ (removed after; JupyterLab
serves only that directory; finished runs are reused); its figures go to a temporary directory.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEASURE = """
(tables) => tables.map((table) => {
  const area = table.closest('.jp-OutputArea-output') || table.parentElement;
  const cells = [...table.querySelectorAll('th, td')].map((c) => ({
    text: c.innerText,
    cut: c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1,
  }));
  return {header: [...table.querySelectorAll('thead th')].map((h) => h.innerText.trim()),
          text: table.innerText, table_width: table.scrollWidth, area_width: area.clientWidth,
          cells: cells.length, cut: cells.filter((c) => c.cut).map((c) => c.text.slice(0, 80))};
})
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    """JupyterLab of the checkout's .venv on `port`, serving `root`, no token, its messages in `log`."""
    cmd = [str(REPO / ".venv" / "bin" / "jupyter"), "lab", "--no-browser", f"--port={port}",
           "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
           "--ServerApp.disable_check_xsrf=True", "--allow-root"]
    lab = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    for _ in range(120):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return lab
        except OSError:
            time.sleep(0.5)
    lab.terminate()
    raise RuntimeError(f"JupyterLab did not listen on port {port}: {log}")


def flat(text: str) -> str:
    return " ".join(text.split())


def run_all_and_measure(url: str, chromium: str, width: int, timeout_s: float, shot: Path) -> dict:
    """Open `url` in Chromium, Run All Cells, wait for the kernel to finish, measure the tables."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium)
        page = browser.new_page(viewport={"width": width, "height": 1000})
        page.goto(url)
        page.wait_for_selector(".jp-Notebook .jp-Cell >> visible=true", timeout=120_000)
        page.wait_for_function("() => document.querySelector('.jp-StatusBar-Widget')"
                               " && document.body.innerText.includes('| Idle')", timeout=120_000)   # kernel ready
        page.click("div.lm-MenuBar-itemLabel:text-is('Run')")
        page.click("li.lm-Menu-item[data-command='runmenu:run-all']")
        t0 = time.time()
        page.wait_for_function("() => [...document.querySelectorAll('.jp-InputPrompt')]"
                               ".some((p) => p.innerText.includes('*'))", timeout=60_000)
        page.wait_for_function("() => ![...document.querySelectorAll('.jp-InputPrompt')]"
                               ".some((p) => p.innerText.includes('*'))", timeout=timeout_s * 1000, polling=2000)
        seconds = time.time() - t0
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                              ":text('Traceback')").count()
        tables = page.locator(".jp-OutputArea-output table")
        found = tables.evaluate_all(MEASURE)
        claims = page.locator(".jp-OutputArea-output table:has(thead th:text-is('verdict'))").first
        news = page.locator(".jp-toast-button:has-text('No')")   # JupyterLab's "notify about news?" toast
        if news.count():
            news.first.click()
        if claims.count():
            for _ in range(10):                                  # its top at the notebook panel's top
                claims.evaluate("(e) => e.scrollIntoView()")
                page.wait_for_timeout(500)
                box = claims.bounding_box()
                if box:
                    page.screenshot(path=str(shot), clip={"x": box["x"], "y": max(box["y"], 0), "width": box["width"],
                                                          "height": min(box["height"], 1000 - max(box["y"], 0))})
                    break
        version = browser.version
        browser.close()
    return {"run_all_seconds": round(seconds, 1), "tracebacks": errors, "browser": f"Chromium {version}",
            "viewport_width": width,
            "tables": [t for t in found if t["header"][:1] == ["verdict"] or "headline" in t["header"]]}


def check(measured: dict, claims_csv: Path) -> list[str]:
    """The failed checks (module doc)."""
    problems = []
    views = [t for t in measured["tables"] if t["header"][:1] == ["verdict"]]
    if not views:
        problems.append("no claims view (a table headed 'verdict') in the page")
    for t in measured["tables"]:
        which = "claims view" if t["header"][:1] == ["verdict"] else "headline table"
        if t["cut"]:
            problems.append(f"{which}: {len(t['cut'])} cut cells, e.g. {t['cut'][0]!r}")
        if t["table_width"] > t["area_width"] + 1:
            problems.append(f"{which}: {t['table_width']} px wide in an output area of {t['area_width']} px")
    page = " ".join(flat(t["text"]) for t in views)
    with claims_csv.open() as f:
        for row in csv.DictReader(f):
            for column in ("verdict", "measured", "reason"):
                if flat(row[column]) not in page:
                    problems.append(f"{row['id']}: its {column} is not in the page whole: {row[column][:80]!r}")
    return problems


def check_notebook(name: str, out: Path, chromium: str, width: int, timeout_s: float) -> dict:
    """Run All of notebook `name` in JupyterLab in Chromium: a copy in a directory of its own inside
    the checkout (so that the kernel finds the repository's registrations, ledger, headlines and
    finished runs as from notebooks/; JupyterLab serves only that directory, and it is removed
    after), its figures in a temporary directory; its measurements (`run_all_and_measure`) and
    failed checks (`check`)."""
    source = REPO / "notebooks" / f"{name}.ipynb"
    root = Path(tempfile.mkdtemp(prefix="check.", dir=Path(__file__).parent / "browser"))   # git-ignored
    copy = root / source.name
    figures = Path(tempfile.mkdtemp(prefix="browser_check."))
    shutil.copy(source, copy)
    env = dict(os.environ, DISTSGD_PROFILE="quick", DISTSGD_FIGURES=str(figures),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "lib"), os.environ.get("PYTHONPATH", "")) if p))
    port = free_port()
    lab = start_lab(root, port, env, figures / "lab.log")
    try:
        measured = run_all_and_measure(f"http://127.0.0.1:{port}/lab/tree/{copy.name}?reset", chromium, width,
                                       timeout_s, out / f"{name}_claims.png")
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    problems = check(measured, figures / name / "claims.csv")
    shutil.rmtree(figures, ignore_errors=True)
    tables = [{k: v for k, v in t.items() if k != "text"} for t in measured["tables"]]
    return {"notebook": name, **measured, "tables": tables, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", nargs="+", default=["00_baselines"],
                        help="notebooks of notebooks/ by name (default 00_baselines), or 'all'")
    parser.add_argument("--out", type=Path, required=True, help="where to write browser_check.json and the screenshots")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium executable")
    parser.add_argument("--width", type=int, default=1280, help="the window's width in px (default 1280, a laptop)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds Run All may take (default 900)")
    args = parser.parse_args(argv)
    known = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    names = known if args.notebook == ["all"] else args.notebook
    if not set(names) <= set(known):
        parser.error(f"--notebook {' '.join(args.notebook)}: allowed values are 'all' or some of {', '.join(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    lab_version = subprocess.run([str(REPO / ".venv" / "bin" / "jupyter"), "lab", "--version"],
                                 capture_output=True, text=True).stdout.strip()
    reports = []
    for name in names:
        report = check_notebook(name, args.out, args.chromium, args.width, args.timeout)
        reports.append(report)
        for t in report["tables"]:
            print(f"{name} {t['header'][0]} table: {t['cells']} cells, {len(t['cut'])} cut, "
                  f"{t['table_width']} px in {t['area_width']} px")
        print("\n".join(report["problems"])
              or f"{name}: every claim reads in full (Run All {report['run_all_seconds']} s)")
    per_run = ("browser", "viewport_width")
    summary = {"date": time.strftime("%Y-%m-%d"), "jupyterlab": lab_version, "browser": reports[0]["browser"],
               "viewport_width": args.width,
               "notebooks": [{k: v for k, v in r.items() if k not in per_run} for r in reports]}
    (args.out / "browser_check.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if any(r["problems"] for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
